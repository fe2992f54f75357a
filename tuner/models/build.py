"""One way to build any model a sweep names: tuner's own (``builtin``), torchvision's by
name (``zoo``) or a user's factory (``factory``, its reference in the options)."""

from __future__ import annotations

from typing import Any

from torch import nn

from tuner.models import builtin, factory, zoo

FACTORY = "factory"  # the model name of a user's factory; its reference is options["factory"]


def build_model(
    name: str,
    *,
    in_channels: int,
    num_classes: int,
    image_size: int,
    options: dict[str, Any],
    code_folder: Any = None,
) -> nn.Module:
    """A fresh model from its name and options (the model config minus ``name``).
    ``code_folder``: where a factory's module is imported from (else: already on the path)."""
    if name == FACTORY:
        rest = {k: v for k, v in options.items() if k != "factory"}
        return factory.build(
            options["factory"],
            in_channels=in_channels,
            num_classes=num_classes,
            image_size=image_size,
            options=rest,
            folder=code_folder,
        )
    if name.startswith(zoo.PREFIX):
        return zoo.build(name, in_channels=in_channels, num_classes=num_classes, options=options)
    return builtin.build_model(
        name, in_channels=in_channels, num_classes=num_classes, image_size=image_size, options=options
    )


def label(name: str, options: dict[str, Any]) -> str:
    """A short name for the model (registered model names): cnn, resnet50, my_models.build."""
    if name == FACTORY:
        return str(options["factory"]).replace(":", ".")
    return name.removeprefix(zoo.PREFIX)
