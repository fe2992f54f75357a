"""Any torchvision classification network by name: ``model: {name: "torchvision:resnet50"}``.

The builder is called with ``weights=None`` (nothing is downloaded at run time) and
``num_classes`` set to the data's classes; the model's other options go to it as keywords
(``dropout``, ``zero_init_residual``, ...). ``weights: FILE`` loads a local state dict
(an ImageNet one, say): every key of the file whose shape matches is loaded, except the
classifier when the data have another number of classes; a key the network lacks, or one
whose shape differs elsewhere, is an error naming the file and the key.

Grey images (one channel) are repeated to the three channels every torchvision network
takes: a ``RepeatChannels`` layer goes in front, so pretrained first-layer filters apply
unchanged (adapting the first conv would change the very weights a user loaded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tuner.errors import TunerError

PREFIX = "torchvision:"


class RepeatChannels(nn.Module):
    """A grey ``[N, 1, H, W]`` batch as ``[N, 3, H, W]``: the network's own input."""

    def __init__(self, channels: int = 3):
        super().__init__()
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(-1, self.channels, -1, -1)


def builders() -> list[str]:
    """The classification builders torchvision has (resnet50, vit_b_16, ...)."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def builder(name: str) -> Any:
    import torchvision

    architecture = name.removeprefix(PREFIX)
    if architecture not in builders():
        import difflib

        close = difflib.get_close_matches(architecture, builders(), n=1)
        hint = f"; did you mean {PREFIX + close[0]!r}?" if close else ""
        raise TunerError(f"model.name: torchvision has no classification model {architecture!r}{hint}")
    return torchvision.models.get_model_builder(architecture)


def build(name: str, *, in_channels: int, num_classes: int, options: dict[str, Any]) -> nn.Module:
    """A fresh network (``options['weights']``, a local file, is loaded by ``load_weights``)."""
    kwargs = {k: v for k, v in options.items() if k != "weights"}
    network = builder(name)(weights=None, num_classes=num_classes, **kwargs)
    return nn.Sequential(RepeatChannels(), network) if in_channels == 1 else network


def load_weights(model: nn.Module, file: str | Path, in_channels: int) -> list[str]:
    """Load a local state dict into a fresh zoo ``model``; returns the keys left as built
    (the classifier, when the file's has another number of classes)."""
    state = read_weights(file)
    target = model[1] if in_channels == 1 and isinstance(model, nn.Sequential) else model
    own = target.state_dict()
    unknown = [key for key in state if key not in own]
    if unknown:
        raise TunerError(f"model.weights: {file}: key {unknown[0]!r} is not in the network ({len(unknown)} such keys)")
    mismatched = [key for key in state if state[key].shape != own[key].shape]
    head = _classifier_keys(target)
    wrong = [key for key in mismatched if key not in head]
    if wrong:
        key = wrong[0]
        raise TunerError(
            f"model.weights: {file}: key {key!r} has shape {tuple(state[key].shape)}, "
            f"the network's is {tuple(own[key].shape)}"
        )
    loadable = {k: v for k, v in state.items() if k not in mismatched}
    target.load_state_dict(loadable, strict=False)
    return sorted(set(own) - set(loadable))


def read_weights(file: str | Path) -> dict[str, torch.Tensor]:
    path = Path(file)
    if not path.is_file():
        raise TunerError(f"model.weights: {file}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file is the same one line
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TunerError(f"model.weights: {file}: not a state dict torch can read ({reason})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise TunerError(f"model.weights: {file}: not a state dict (a mapping of names to tensors)")
    return state


def _classifier_keys(network: nn.Module) -> set[str]:
    """The keys of the network's last linear layer (its classifier, sized to the data)."""
    last = None
    for name, module in network.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    return {f"{last}.weight", f"{last}.bias"} if last is not None else set()
