"""Augmentation as config (``data.augment``), applied per batch to uint8 ``[B, C, H, W]``
tensors on the worker's device: no per-image PIL work in the training loop.

- ``random_crop``: pad by ``data.crop_padding`` (zeros) and crop back to ``H x W`` at a
  random offset per image (the CIFAR recipe);
- ``horizontal_flip``: mirror half of the images, chosen at random.

Randomness comes from a generator the caller seeds (per trial, epoch and rank), so a
resumed epoch sees the same augmentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

AUGMENTATIONS = ("random_crop", "horizontal_flip")


def random_crop(x: Any, padding: int, generator: Any) -> Any:
    import torch

    if padding <= 0:
        return x
    batch, _, height, width = x.shape
    padded = torch.nn.functional.pad(x, (padding, padding, padding, padding))
    dy = torch.randint(0, 2 * padding + 1, (batch,), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (batch,), device=x.device, generator=generator)
    rows = (dy[:, None] + torch.arange(height, device=x.device))[:, :, None]  # [B, H, 1]
    cols = (dx[:, None] + torch.arange(width, device=x.device))[:, None, :]  # [B, 1, W]
    images = torch.arange(batch, device=x.device)[:, None, None]
    # Advanced indexing on dims 0, 2, 3 with the channel slice between: [B, H, W, C].
    return padded[images, :, rows, cols].permute(0, 3, 1, 2).contiguous()


def horizontal_flip(x: Any, generator: Any) -> Any:
    import torch

    flip = torch.rand(x.shape[0], device=x.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def apply(x: Any, names: Sequence[str], *, padding: int, generator: Any) -> Any:
    """``names`` in order, on a uint8 batch; returns a new batch (the input is not changed)."""
    for name in names:
        if name == "random_crop":
            x = random_crop(x, padding, generator)
        elif name == "horizontal_flip":
            x = horizontal_flip(x, generator)
        else:
            raise ValueError(f"unknown augmentation {name!r}; choose from {', '.join(AUGMENTATIONS)}")
    return x


def generator_for(device: Any, seed: int, epoch: int, rank: int) -> Any:
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed((seed * 1_000_003 + epoch * 9_973 + rank) % (2**63))
    return generator
