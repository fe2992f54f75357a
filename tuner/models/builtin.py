"""Models: the classic MNIST CNN and torchvision ResNets adapted to small images."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class MnistCnn(nn.Module):
    """conv3x3 -> ReLU -> conv3x3 -> ReLU -> max-pool -> dropout -> fc -> ReLU -> dropout -> fc.

    With conv1=32, conv2=64, hidden=128 it is PyTorch's MNIST example network;
    ``batch_norm`` puts a BatchNorm after each conv (faster to train, higher accuracy).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        conv1: int = 16,
        conv2: int = 32,
        hidden: int = 128,
        dropout: float = 0.25,
        fc_dropout: float = 0.5,
        batch_norm: bool = False,
    ):
        super().__init__()
        pooled = (image_size - 4) // 2

        def norm(channels: int) -> list[nn.Module]:  # after each conv, before its ReLU
            # (none: the layers keep the indices, so older checkpoints still load)
            return [nn.BatchNorm2d(channels)] if batch_norm else []

        self.features = nn.Sequential(
            nn.Conv2d(in_channels, conv1, 3, bias=not batch_norm),
            *norm(conv1),
            nn.ReLU(inplace=True),
            nn.Conv2d(conv1, conv2, 3, bias=not batch_norm),
            *norm(conv2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Dropout(dropout),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(conv2 * pooled * pooled, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(fc_dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _resnet(depth: int, in_channels: int, num_classes: int, zero_init_residual: bool = False) -> nn.Module:
    import torchvision

    builder = {18: torchvision.models.resnet18, 34: torchvision.models.resnet34}[depth]
    model = builder(weights=None, num_classes=num_classes, zero_init_residual=zero_init_residual)
    # ImageNet's 7x7/2 stem and max-pool would shrink 28-32 px images to 7-8 px at once.
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


class SyntheticModel(nn.Module):
    """The synthetic trial's stand-in weights (tuner/trial/synthetic.py): one linear layer, so
    that its checkpoints, export and served model are real and tiny."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int, **_curve: Any):
        super().__init__()
        self.linear = nn.Linear(in_channels * image_size * image_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))


MODELS = {
    "cnn": lambda c, k, s, **o: MnistCnn(c, k, s, **o),
    "resnet18": lambda c, k, s, **o: _resnet(18, c, k, **o),
    "resnet34": lambda c, k, s, **o: _resnet(34, c, k, **o),
    "synthetic": lambda c, k, s, **o: SyntheticModel(c, k, s, **o),
}


def build_model(
    name: str, *, in_channels: int, num_classes: int, image_size: int, options: dict[str, Any]
) -> nn.Module:
    """A fresh model from its registry name and options (the model config minus ``name``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}")
    return MODELS[name](in_channels, num_classes, image_size, **options)
