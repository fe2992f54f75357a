"""A small CNN of the user's own, built by a factory tuner calls with the sweep's model
options (``width``, ``dropout``) and the data's shape (``num_classes``, ``in_channels``,
``image_size``)."""

from torch import nn


def build(width: int = 32, dropout: float = 0.1, *, num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    """Two conv blocks of ``width`` and ``2 * width`` channels, each halving the image,
    then a linear classifier; takes normalised images ``[N, in_channels, size, size]``."""
    side = image_size // 4  # two 2x2 max-pools
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(2 * width * side * side, num_classes),
    )
