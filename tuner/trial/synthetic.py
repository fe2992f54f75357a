"""A synthetic trial: tuner's whole machinery, no training.

``model: {name: synthetic, epoch_s: 0.05}`` runs a trial that, each epoch, sleeps
``epoch_s`` and reports a known noisy learning curve instead of training, so thousands
of trials can go through Tune, the history, MLflow's nested runs, TensorBoard,
checkpoints and the export on a laptop (benchmarks/studies/scaling.py measures tuner's own cost
per trial and per result with it; the schedulers' behaviour at that scale is checked
against it too).

The curve is a state that a checkpoint carries, so PBT's exploit (copy a better trial's
state, perturb its hyperparameters) and every resume continue it:

    skill <- skill + rate(lr, weight_decay) * (1 - skill)        each epoch
    val_accuracy = FLOOR + (CEILING - FLOOR) * skill + noise     noise ~ N(0, noise), seeded

``rate`` peaks at ``OPTIMUM_LR`` and falls off as a Gaussian in log10(lr) with a width of
``LR_WIDTH`` decades; weight decay above ``WEIGHT_DECAY_FREE`` slows it. Everything here
is pure Python, so Ray Tune's and Optuna's contestants in the benchmark call the very
same functions.
"""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the driver imports this module for its curve: no torch there)
    from tuner.trial.session import LoopSettings

FLOOR, CEILING = 0.1, 0.98  # chance on 10 classes; the best a trial can reach
OPTIMUM_LR, LR_WIDTH, MAX_RATE = 2e-3, 0.5, 0.6
WEIGHT_DECAY_FREE = 1e-4


def rate(lr: float, weight_decay: float = 0.0) -> float:
    """How much of the remaining gap one epoch closes (0..MAX_RATE)."""
    distance = (math.log10(lr) - math.log10(OPTIMUM_LR)) / LR_WIDTH
    penalty = 1.0 / (1.0 + max(0.0, weight_decay - WEIGHT_DECAY_FREE) * 1e3)
    return MAX_RATE * math.exp(-0.5 * distance * distance) * penalty


def step(skill: float, lr: float, weight_decay: float = 0.0) -> float:
    """The skill after one more epoch."""
    return skill + rate(lr, weight_decay) * (1.0 - skill)


def expected_accuracy(skill: float) -> float:
    return FLOOR + (CEILING - FLOOR) * skill


def observe(skill: float, noise: float, seed: int, epoch: int) -> tuple[float, float]:
    """(val_accuracy, val_loss) measured at ``skill``: the expected accuracy plus seeded noise."""
    jitter = random.Random(seed * 100_003 + epoch).gauss(0.0, noise) if noise else 0.0
    accuracy = min(1.0, max(0.0, expected_accuracy(skill) + jitter))
    return accuracy, -math.log(max(accuracy, 1e-6))


def curve(lr: float, weight_decay: float, epochs: int, *, noise: float = 0.0, seed: int = 0) -> list[float]:
    """The validation accuracies a fresh trial reports, epoch 1..epochs."""
    skill, accuracies = 0.0, []
    for epoch in range(1, epochs + 1):
        skill = step(skill, lr, weight_decay)
        accuracies.append(observe(skill, noise, seed, epoch)[0])
    return accuracies


def run(loop: LoopSettings, session: Any, model: Any, state: dict[str, Any] | None) -> None:
    """The synthetic trial's epochs, hosted like the real loop (tuner/trial/loop.py): resume,
    report and checkpoint every epoch through ``session``; ``model`` (a tiny linear layer)
    is saved so that the export and the served model have weights to load."""
    from tuner.trial.session import report_epoch

    options, train = loop.model_options, loop.train
    epoch_s, noise = float(options["epoch_s"]), float(options["noise"])
    skill = float(state.get("skill", 0.0)) if state else 0.0
    start_epoch = int(state["epoch"]) if state else 0
    resumed_from = str(state["trial_id"]) if state else ""
    first_step_at = time.time()
    for epoch in range(start_epoch, train["epochs"]):
        started = time.perf_counter()
        if epoch_s:
            time.sleep(epoch_s)
        skill = step(skill, train["lr"], train["weight_decay"])
        val_accuracy, val_loss = observe(skill, noise, loop.seed, epoch + 1)
        metrics = {
            "epoch": epoch + 1,
            "train_loss": val_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": train["lr"],
            "compute_s": time.perf_counter() - started,
            "images_per_s": 0.0,
            "train_images": 0,
            "resumed_from": resumed_from,
            "world_size": 1,
            "nodes": "",
            "entered_at": loop.entered_at,
            "first_step_at": first_step_at,
        }
        state_now = {"model": model.state_dict(), "optimizer": {}, "skill": skill}
        report_epoch(session, metrics, state_now, epoch + 1, loop.trial_id)
