"""A user's model factory: ``model: {factory: "my_models:build", width: 64}``.

The factory is called with the model's options as keywords, plus those of
``num_classes``, ``in_channels`` and ``image_size`` (the data's) that its signature takes,
and returns an ``nn.Module`` that maps normalised float images ``[N, C, H, W]`` to one
logit per class. tuner's data, loop, AMP, DDP, schedules, checkpoints and export apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from tuner.errors import TunerError
from tuner.usercode import names

DATA_KEYWORDS = ("num_classes", "in_channels", "image_size")


def build(
    reference: str, *, in_channels: int, num_classes: int, image_size: int, options: dict[str, Any], folder: Any = None
) -> nn.Module:
    function = names.load(reference, folder, field="model.factory")
    data = {"num_classes": num_classes, "in_channels": in_channels, "image_size": image_size}
    taken = names.accepted_keywords(function, data)
    model = function(**options, **{k: v for k, v in data.items() if k in taken})
    if not isinstance(model, nn.Module):
        raise TunerError(f"model.factory: {reference!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def check(reference: str, options: dict[str, Any], folder: str | Path | None) -> None:
    """The factory imports and takes these options (before Ray starts)."""
    function = names.load(reference, folder, field="model.factory")
    data = names.accepted_keywords(function, DATA_KEYWORDS)
    names.check_takes(function, reference, field="model.factory", keywords=[*options, *data])
