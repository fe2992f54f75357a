"""Shared pieces of the integration tests: data root, a small sweep, leak checks."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_DATA


def data_root() -> Path:
    """../shared/data when it is there (CI, this repo's machines), else $TUNER_DATA_DIR."""
    root = Path(os.environ.get("TUNER_DATA_DIR") or SHARED_DATA)
    if not (root / "MNIST" / "raw").is_dir():
        pytest.skip(f"real MNIST not found under {root}; set TUNER_DATA_DIR")
    return root


def small_sweep(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A sweep dict on a few thousand real MNIST images; sections override the defaults."""
    base: dict[str, Any] = {
        "name": "it",
        "output_dir": str(tmp_path / "runs"),
        "data": {"dataset": "mnist", "root": str(data_root()), "train_subset": 3000, "download": False},
        "model": {"name": "cnn", "conv1": 8, "conv2": 16, "hidden": 64},
        "train": {"epochs": 2, "batch_size": 64, "lr": 2e-3},
        "trials": {"num_samples": 2},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


# Detached singletons Ray itself keeps, one per cluster (not per trial): not leaks.
RAY_SINGLETONS = {"_AutoscalingCoordinatorActor"}


def assert_no_leaks(timeout_s: float = 60.0) -> None:
    """No placement group or actor may outlive a sweep (stopped trials must free workers)."""
    import ray
    from ray.util.state import list_actors

    deadline = time.monotonic() + timeout_s
    while True:
        groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
        actors = list_actors(filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
        actors = [a for a in actors if a.class_name not in RAY_SINGLETONS]
        if not groups and not actors:
            return
        if time.monotonic() > deadline:
            names = sorted(a.class_name for a in actors)
            raise AssertionError(f"left after the sweep: {len(groups)} placement group(s), actors {names}")
        time.sleep(1.0)
