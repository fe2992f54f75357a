"""Augmentation on uint8 batches: shapes and dtype kept, crops are shifted windows of the
padded image, flips mirror about half, and a seeded generator repeats itself."""

from __future__ import annotations

import pytest
import torch

from tuner.data import augment


def _batch(n: int = 64) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 8, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def test_a_crop_is_a_window_of_the_zero_padded_image():
    x = _batch()
    out = augment.random_crop(x, 2, augment.generator_for("cpu", 0, 0, 0))
    assert out.shape == x.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(len(x)):
        windows = [(dy, dx) for dy in range(5) for dx in range(5)
                   if torch.equal(padded[i, :, dy : dy + 8, dx : dx + 10], out[i])]  # fmt: skip
        assert windows, f"image {i} is not a window of its padded self"
    assert not torch.equal(out, x)  # some offset other than (2, 2) was drawn


def test_a_flip_mirrors_about_half_and_keeps_the_rest():
    x = _batch(400)
    out = augment.horizontal_flip(x, augment.generator_for("cpu", 0, 0, 0))
    flipped = [torch.equal(out[i], x[i].flip(-1)) for i in range(len(x))]
    kept = [torch.equal(out[i], x[i]) for i in range(len(x))]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 150 < sum(flipped) < 250


def test_the_same_seed_gives_the_same_batch_and_another_epoch_another():
    x = _batch()
    names = ["random_crop", "horizontal_flip"]
    a = augment.apply(x, names, padding=4, generator=augment.generator_for("cpu", 7, 3, 0))
    b = augment.apply(x, names, padding=4, generator=augment.generator_for("cpu", 7, 3, 0))
    c = augment.apply(x, names, padding=4, generator=augment.generator_for("cpu", 7, 4, 0))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="unknown augmentation 'rotate'"):
        augment.apply(x, ["rotate"], padding=4, generator=augment.generator_for("cpu", 0, 0, 0))
