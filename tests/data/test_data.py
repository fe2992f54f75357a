"""Data sets as uint8 arrays: real MNIST IDX files, a generated CIFAR-10 folder, splits, errors."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from integration_helpers import data_root

from tuner.data.datasets import load_test_split, load_training_data, normalise
from tuner.errors import TunerError
from tuner.models.builtin import build_model


def test_mnist_is_read_from_the_idx_files_with_a_seeded_disjoint_validation_split():
    root = str(data_root())
    data = load_training_data("mnist", root, val_fraction=0.1, train_subset=None, seed=0, download=False)
    assert data.train.images.shape == (54_000, 1, 28, 28) and data.train.images.dtype == np.uint8
    assert data.val.images.shape == (6_000, 1, 28, 28)
    assert data.train.labels.dtype == np.int64 and set(np.unique(data.train.labels)) == set(range(10))
    # The published MNIST mean pixel (0.1307) from the raw bytes: the files were read correctly.
    assert abs(float(data.train.images.mean()) / 255 - 0.1307) < 0.002
    again = load_training_data("mnist", root, val_fraction=0.1, train_subset=None, seed=0, download=False)
    assert np.array_equal(again.val.labels, data.val.labels)  # same seed, same split
    other = load_training_data("mnist", root, val_fraction=0.1, train_subset=None, seed=1, download=False)
    assert not np.array_equal(other.val.images, data.val.images)
    small = load_training_data("mnist", root, val_fraction=0.2, train_subset=1000, seed=0, download=False)
    assert (len(small.train), len(small.val)) == (800, 200)
    test = load_test_split("mnist", root, download=False)
    assert test.images.shape == (10_000, 1, 28, 28)


def _write_cifar(folder: Path, per_batch: int) -> None:
    """torchvision's cifar-10-batches-py layout, with random images."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            "data": rng.integers(0, 256, size=(per_batch, 3 * 32 * 32), dtype=np.uint8),
            "labels": rng.integers(0, 10, size=per_batch).tolist(),
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)


def test_cifar10_folder_loads_and_feeds_both_models(tmp_path):
    _write_cifar(tmp_path / "cifar-10-batches-py", per_batch=40)
    data = load_training_data("cifar10", str(tmp_path), val_fraction=0.25, train_subset=None, seed=0, download=False)
    assert data.train.images.shape == (150, 3, 32, 32) and len(data.val) == 50
    assert data.channels == 3 and data.size == 32
    x = normalise(torch.from_numpy(np.array(data.train.images[:4])), data.mean, data.std)
    for name, options in (("cnn", {}), ("resnet18", {})):
        model = build_model(name, in_channels=3, num_classes=10, image_size=32, options=options)
        assert model(x).shape == (4, 10)


def test_a_missing_data_set_names_the_folder_and_leaves_nothing_behind(tmp_path):
    root = tmp_path / "nothing_here"
    with pytest.raises(TunerError, match=r"data set 'fashion_mnist' not found in .*nothing_here/FashionMNIST"):
        load_training_data("fashion_mnist", str(root), val_fraction=0.1, train_subset=None, seed=0, download=False)
    assert not root.exists()


@pytest.mark.parametrize("augmented", [False, True])
def test_a_split_normalised_once_gives_the_batches_normalised_per_step(augmented):
    # On a GPU the trial's loop normalises the split once (where it fits); the batches
    # must be the ones a per-batch normalisation gives, and an augmented split stays uint8.
    from tuner.data.datasets import Split, TrainingData
    from tuner.trial.loop import InMemoryData

    rng = np.random.default_rng(0)
    split = Split(rng.integers(0, 256, (300, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, 300))
    data = TrainingData("mnist", split, split, (0.1307,), (0.3081,), 10, 1, 28)
    cpu = torch.device("cpu")
    per_step = InMemoryData(data, cpu, 0, 1)
    once = InMemoryData(data, cpu, 0, 1, augmented=augmented, normalise_once=True)
    assert per_step.train_x.dtype == torch.uint8  # a CPU's default: no float copy per trial
    assert once.train_x.dtype == (torch.uint8 if augmented else torch.float32)
    assert once.val_x.dtype == torch.float32
    flip = (lambda x: x.flip(-1)) if augmented else None
    pairs = [
        *zip(per_step.train_batches(3, 1, 64, flip), once.train_batches(3, 1, 64, flip), strict=True),
        *zip(per_step.val_batches(128), once.val_batches(128), strict=True),
    ]
    assert len(pairs) == 5 + 3
    for (x1, y1), (x2, y2) in pairs:
        assert x1.dtype == x2.dtype == torch.float32
        torch.testing.assert_close(x1, x2)
        assert torch.equal(y1, y2)
