"""Models: the classic MNIST CNN and torchvision ResNets adapted to small images."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class MnistCnn(nn.Module):
    """conv3x3 -> ReLU -> conv3x3 -> ReLU -> max-pool -> dropout -> fc -> ReLU -> dropout -> fc.

    With conv1=32, conv2=64, hidden=128 it is PyTorch's MNIST example network.
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
    ):
        super().__init__()
        pooled = (image_size - 4) // 2
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, conv1, 3),
            nn.ReLU(inplace=True),
            nn.Conv2d(conv1, conv2, 3),
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


MODELS = {
    "cnn": lambda c, k, s, **o: MnistCnn(c, k, s, **o),
    "resnet18": lambda c, k, s, **o: _resnet(18, c, k, **o),
    "resnet34": lambda c, k, s, **o: _resnet(34, c, k, **o),
}


def build_model(
    name: str, *, in_channels: int, num_classes: int, image_size: int, options: dict[str, Any]
) -> nn.Module:
    """A fresh model from its registry name and options (the model config minus ``name``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}")
    return MODELS[name](in_channels, num_classes, image_size, **options)
