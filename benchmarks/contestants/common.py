"""What every contestant of the benchmark shares: the budget, the data split, the model.

Each contestant script takes ``--budget <json>`` and ``--out <result.json>``;
``benchmarks/run.py`` launches them one after another, measures their wall time and
memory from outside, and compares. The budget is the same for all: the same
configurations (learning rates), the same model, the same epochs, the same
train/validation split and the same test set.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used: tuner's wrapper must not pay for it
    import torch
    from torch import nn

REPO = Path(__file__).resolve().parents[2]  # benchmarks/contestants/common.py
# The model of each suite: the default sweep's light CNN, and PyTorch's classic MNIST
# example CNN (32/64 channels, fc 9216 -> 128).
MODELS = {
    "default": {"conv1": 16, "conv2": 32, "hidden": 128},
    "classic": {"conv1": 32, "conv2": 64, "hidden": 128},
}


@dataclass
class Budget:
    """One suite's budget: every contestant trains these configurations of this model."""

    suite: str
    lrs: list[float]  # one trial per learning rate, in this order
    epochs: int  # max epochs per trial
    reduction_factor: int = 2  # ASHA / successive halving
    grace_period: int = 1
    batch_size: int = 128
    seed: int = 0
    val_fraction: float = 0.1
    train_subset: int | None = None  # None: the full 60,000-image training set
    data_root: str = field(default_factory=lambda: os.environ.get("TUNER_DATA_DIR", str(REPO / "data")))
    slots: int = 2  # concurrent one-CPU trials where the contestant runs trials in parallel

    @property
    def model(self) -> dict[str, int]:
        return MODELS[self.suite]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Budget:
        return cls(**json.loads(text))


def contestant_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--budget", required=True, help="the Budget as JSON")
    parser.add_argument("--out", required=True, help="where to write this contestant's result JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (where the contestant sets them)")
    parser.add_argument("--copies", type=int, default=1, help="raw_pytorch: this many runs at once")
    return parser.parse_args()


def write_result(path: str, **result: Any) -> None:
    Path(path).write_text(json.dumps(result, indent=2, default=float))


def build_cnn(budget: Budget, dropout: float = 0.25) -> nn.Module:
    from tuner.models.builtin import MnistCnn  # imports torch

    return MnistCnn(1, 10, 28, dropout=dropout, **budget.model)


class Tensors:
    """MNIST as pre-normalised float tensors in memory (what a careful hand-written loop does)."""

    def __init__(self, budget: Budget):
        import torch

        from tuner.data.datasets import DATASETS, load_split, normalise, resolve_root, split_indices

        root = resolve_root(budget.data_root)
        full = load_split("mnist", root, True)
        test = load_split("mnist", root, False)
        train_idx, val_idx = split_indices(
            len(full), val_fraction=budget.val_fraction, train_subset=budget.train_subset, seed=budget.seed
        )
        info = DATASETS["mnist"]

        def prepare(images: np.ndarray) -> torch.Tensor:
            return normalise(torch.from_numpy(images), info.mean, info.std)  # once, not per batch

        self.train_x, self.train_y = prepare(full.images[train_idx]), torch.from_numpy(full.labels[train_idx])
        self.val_x, self.val_y = prepare(full.images[val_idx]), torch.from_numpy(full.labels[val_idx])
        self.test_x, self.test_y = prepare(test.images), torch.from_numpy(test.labels)


def train_epoch(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor, batch_size: int, generator) -> float:
    import torch
    from torch import nn

    model.train()
    loss_fn = nn.CrossEntropyLoss()
    order = torch.randperm(len(y), generator=generator)
    total = 0.0
    for begin in range(0, len(order), batch_size):
        index = order[begin : begin + batch_size]
        loss = loss_fn(model(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(index)
    return total / len(order)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[b : b + 1024]).argmax(1) == y[b : b + 1024]).sum()) for b in range(0, len(y), 1024))
    return correct / len(y)


def improvements(epochs: list[tuple[float, float, Any]]) -> list[tuple[float, float, Any]]:
    """The moments the best validation accuracy so far rose: ``(at, val_accuracy, model)``
    from every epoch's ``(at, val_accuracy, model)``, where ``model`` is whatever can be
    scored on the test set later (a checkpoint path, a state dict)."""
    rising: list[tuple[float, float, Any]] = []
    for at, value, model in sorted(epochs, key=lambda entry: entry[0]):
        if not rising or value > rising[-1][1]:
            rising.append((at, value, model))
    return rising


def scored_curve(epochs: list[tuple[float, float, Any]], test_accuracy) -> list[tuple[float, float, float]]:
    """``(at, best val so far, that model's test accuracy)`` at each improvement: what a
    user who stopped the contestant at that moment would hold. ``test_accuracy(model)``
    scores one model; it runs after the contestant finished, outside its timed work."""
    return [(at, value, test_accuracy(model)) for at, value, model in improvements(epochs)]


class Clock:
    """Wall time since the contestant's process started (imports included)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.started


def one_trial_epochs(sweep: dict, folder: Path, env: dict[str, str]) -> dict:
    """``sweep`` (one trial, named bench, its output_dir set) run by ``python -m tuner sweep``
    from ``folder``; the trial's images/s in its first and last epochs (its history), its
    last validation accuracy, and the plan's data line."""
    import json
    import subprocess
    import sys

    import yaml

    file = folder / f"sweep-{Path(sweep['output_dir']).name}.yaml"
    file.write_text(yaml.safe_dump(sweep))
    done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(file)], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    history = next((Path(sweep["output_dir"]) / "bench" / "history").glob("*.jsonl"))
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    plan = next(line for line in done.stdout.splitlines() if line.startswith("  data "))
    return {
        "images_per_s_epoch1": rows[0]["images_per_s"],
        "images_per_s_epoch2": rows[-1]["images_per_s"],
        "val_accuracy": rows[-1]["val_accuracy"],
        "train_images": rows[-1].get("train_images"),
        "plan": plan.strip(),
    }
