"""The objective functions of benchmarks/studies/search_quality.py, each with a fidelity (epochs).

Pure Python (math, random, zlib, fcntl): the same module runs in every contestant's
trials (tuner copies it into the sweep's code folder; Ray Tune's workers and the
in-process Optuna study import it from benchmarks/).

Every problem is minimised and has a known optimum ``f*``. A configuration ``x``
reports, at epoch ``t = 1, 2, ...``, a learning curve that converges to ``f(x)``::

    y(x, t) = f(x) + A * exp(-t / tau(x)) + sigma * z(x, t) / sqrt(t),    z ~ N(0, 1), seeded
    tau(x)  = TAU_MIN + (TAU_MAX - TAU_MIN) * h(x)
    h(x)    = 0.6 * (1 - q(x)) + 0.4 * (0.5 + 0.5 * sin(2 pi * sum_j w_j u_j(x)))
    q(x)    = min(1, (f(x) - f*) / A)                       (0 at the optimum, 1 far from it)

``A`` is the problem's scale, ``u(x)`` the configuration in the unit cube. Good
configurations tend to converge slowly (large ``tau``), bad ones fast, with a ripple
over the space on top: curves cross (a config that leads at epoch 1 or 3 is often not
the best at the last epoch), so stopping early is not trivially right. ``z`` is drawn
from the benchmark seed, the configuration and the epoch: the same trial reports the same
curve in every tool. Regret uses the noise-free ``f(x)`` of the configuration whose
*reported* value was best, minus ``f*``.

Problems: ``branin`` (2-d, f* = 0.397887), ``hartmann6`` (6-d, f* = -3.32237),
``conditional`` (an optimizer choice with per-branch parameters; the optimum, 0.05, is in
the narrower sgd branch, the adam branch bottoms out at 0.07), ``zdt1`` (two objectives,
4-d; measured by the hypervolume gap to the true front for the reference point
``ZDT1_REFERENCE``), and ``mnist`` (tuner's light CNN on an MNIST subset: no known optimum,
its "regret" is the validation error of the best-reported trial).
"""

from __future__ import annotations

import fcntl
import math
import os
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAU_MIN, TAU_MAX = 0.7, 4.0  # epochs: how fast a curve converges


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "uniform" or "loguniform"
    low: float
    high: float

    def unit(self, value: float) -> float:
        """The value mapped to [0, 1] (log scale for loguniform)."""
        if self.kind == "loguniform":
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)


@dataclass(frozen=True)
class Problem:
    """A minimisation problem with a fidelity. ``params`` is a flat space; a conditional
    problem has ``branches`` instead: ``choice`` picks one, whose parameters are then searched."""

    name: str
    optimum: float  # f*, or the ideal hypervolume for a two-objective problem
    max_epochs: int  # the schedulers' max_t
    trials: int  # N: the fixed-count budget is N trials x max_epochs epochs
    scale: tuple[float, ...]  # A, per objective
    noise: tuple[float, ...]  # sigma at epoch 1, per objective
    params: tuple[Param, ...] = ()
    choice: str = ""  # the conditional parameter's name
    branches: dict[str, tuple[Param, ...]] = field(default_factory=dict)
    objectives: tuple[str, ...] = ("objective",)
    synthetic: bool = True  # False: a real training task (mnist)
    time_budget_s: float = 0.0  # the equal-wall-time budget of one sweep; 0: from the epoch budget and cost

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1

    @property
    def epoch_budget(self) -> int:
        return self.trials * self.max_epochs

    # --- the space ------------------------------------------------------------------
    def point(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's values in this module's canonical form (``{name: value}``; with a
        ``choice``, its branch under ``choice`` and that branch's values by their own names),
        from whatever form a tool hands them over in."""
        if not self.branches:
            return {p.name: float(params[p.name]) for p in self.params}
        branch, values = _branch_values(self.choice, set(self.branches), params)
        point: dict[str, Any] = {self.choice: branch}
        for p in self.branches[branch]:
            point[p.name] = float(_lookup(values, params, self.choice, branch, p.name))
        return point

    def unit(self, point: dict[str, Any]) -> list[float]:
        if not self.branches:
            return [p.unit(point[p.name]) for p in self.params]
        branch = point[self.choice]
        coordinates = [float(sorted(self.branches).index(branch)) / max(1, len(self.branches) - 1)]
        return coordinates + [p.unit(point[p.name]) for p in self.branches[branch]]

    # --- the functions ----------------------------------------------------------------
    def values(self, point: dict[str, Any]) -> tuple[float, ...]:
        """The noise-free objective value(s) f(x)."""
        return FUNCTIONS[self.name](point)

    def distance(self, point: dict[str, Any], values: tuple[float, ...]) -> float:
        """q(x): 0 at the optimum, 1 at one scale A from it (or more)."""
        if self.multi:  # ZDT1: how far g is above 1 (1 is on the Pareto front)
            return min(1.0, (zdt1_g(point) - 1.0) / 4.0)
        return min(1.0, max(0.0, (values[0] - self.optimum) / self.scale[0]))

    def tau(self, point: dict[str, Any], values: tuple[float, ...]) -> float:
        unit = self.unit(point)
        ripple = 0.5 + 0.5 * math.sin(2 * math.pi * sum(w * u for w, u in zip(RIPPLE, unit, strict=False)))
        h = 0.6 * (1.0 - self.distance(point, values)) + 0.4 * ripple
        return TAU_MIN + (TAU_MAX - TAU_MIN) * h

    def report(self, point: dict[str, Any], epoch: int, seed: int) -> dict[str, float]:
        """What a trial reports at ``epoch`` (1-based): the noisy curve(s), and the noise-free
        value(s) as ``true_<objective>`` (the benchmark's ground truth, not used by any searcher)."""
        values = self.values(point)
        tau = self.tau(point, values)
        key = repr(sorted((k, round(v, 12) if isinstance(v, float) else v) for k, v in point.items()))
        metrics = {}
        for index, name in enumerate(self.objectives):
            rng = random.Random(zlib.crc32(f"{self.name}|{seed}|{key}|{epoch}|{index}".encode()))
            decay = self.scale[index] * math.exp(-epoch / tau)
            metrics[name] = values[index] + decay + self.noise[index] * rng.gauss(0.0, 1.0) / math.sqrt(epoch)
            metrics[f"true_{name}"] = values[index]
        return metrics


# Weights of the ripple term of tau over the unit coordinates (fixed; any irrational-ish values).
RIPPLE = (1.37, 0.73, 1.91, 0.59, 1.13, 0.87)


def _branch_values(choice: str, branches: set[str], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The chosen branch and where its values are: a nested mapping (``{choice: {"name": b, ...}}``
    or ``{choice: {b: {...}}}``) or the flat parameters themselves (``choice: b``)."""
    picked = params[choice]
    if isinstance(picked, dict):
        for key in ("name", "choice", "type", "_name"):
            if picked.get(key) in branches:
                return picked[key], picked
        inner = [key for key in picked if key in branches]
        if len(inner) == 1:
            return inner[0], dict(picked[inner[0]] or {})
        raise KeyError(f"{choice}: cannot tell the branch from {picked!r}")
    if picked not in branches:
        raise KeyError(f"{choice}: {picked!r} is not one of {sorted(branches)}")
    return picked, params


def _lookup(values: dict[str, Any], params: dict[str, Any], choice: str, branch: str, name: str) -> Any:
    for source in (values, params):
        for key in (name, f"{branch}_{name}", f"{branch}.{name}", f"{branch}/{name}", f"{choice}.{branch}.{name}"):
            if key in source and not isinstance(source[key], dict):
                return source[key]
    raise KeyError(f"{choice}={branch}: no value for {name!r} in {sorted(params)}")


# --- the functions ------------------------------------------------------------------------
def branin(point: dict[str, Any]) -> tuple[float]:
    x1, x2 = point["x1"], point["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return ((x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10,)


HARTMANN_ALPHA = (1.0, 1.2, 3.0, 3.2)
HARTMANN_A = (
    (10, 3, 17, 3.5, 1.7, 8),
    (0.05, 10, 17, 0.1, 8, 14),
    (3, 3.5, 1.7, 10, 17, 8),
    (17, 8, 0.05, 10, 0.1, 14),
)
HARTMANN_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)


def hartmann6(point: dict[str, Any]) -> tuple[float]:
    x = [point[f"x{j}"] for j in range(1, 7)]
    total = 0.0
    for alpha, a_row, p_row in zip(HARTMANN_ALPHA, HARTMANN_A, HARTMANN_P, strict=True):
        total += alpha * math.exp(-sum(a * (xj - p) ** 2 for a, xj, p in zip(a_row, x, p_row, strict=True)))
    return (-total,)


def conditional(point: dict[str, Any]) -> tuple[float]:
    """A validation error over an optimizer choice: sgd's optimum (0.05 at lr 0.02, momentum
    0.93) is narrower in log10(lr) and needs momentum right; adam's (0.07 at lr 1e-3) is broad."""
    if point["optimizer"] == "sgd":
        u = math.log10(point["lr"] / 0.02) / 0.5
        v = (point["momentum"] - 0.93) / 0.05
        return (0.05 + 0.04 * u * u + 0.03 * v * v + 0.01 * u * v,)
    w = math.log10(point["lr"] / 1e-3)
    return (0.07 + 0.05 * w * w,)


def zdt1_g(point: dict[str, Any]) -> float:
    rest = [point[f"x{j}"] for j in range(2, ZDT1_DIMS + 1)]
    return 1.0 + 9.0 * sum(rest) / len(rest)


def zdt1(point: dict[str, Any]) -> tuple[float, float]:
    f1 = point["x1"]
    g = zdt1_g(point)
    return f1, g * (1.0 - math.sqrt(f1 / g))


ZDT1_DIMS = 4
ZDT1_REFERENCE = (1.1, 11.0)  # every point of the domain is inside it (f1 <= 1, f2 <= 10)


def zdt1_ideal_hypervolume(reference: tuple[float, float] = ZDT1_REFERENCE) -> float:
    """The hypervolume of ZDT1's true front f2 = 1 - sqrt(f1), f1 in [0, 1] (r1 >= 1, r2 >= 1):
    integral of r2 - (1 - sqrt(a)) over [0, 1], plus the strip (r1 - 1) * r2."""
    r1, r2 = reference
    return (r2 - 1.0 / 3.0) + (r1 - 1.0) * r2


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float] = ZDT1_REFERENCE) -> float:
    """The area two-objective (minimised) points dominate inside the reference box (tuner's own)."""
    from tuner.folder.pareto import hypervolume as dominated

    return dominated(points, reference, ("min", "min"))


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (both objectives minimised)."""
    front = []
    for i, (a, b) in enumerate(points):
        if not any((c <= a and d <= b) and (c < a or d < b) for j, (c, d) in enumerate(points) if j != i):
            front.append(i)
    return front


FUNCTIONS = {"branin": branin, "hartmann6": hartmann6, "conditional": conditional, "zdt1": zdt1}

PROBLEMS: dict[str, Problem] = {
    "branin": Problem(
        name="branin",
        optimum=0.397887,
        max_epochs=9,
        trials=24,
        scale=(30.0,),
        noise=(2.0,),
        params=(Param("x1", "uniform", -5.0, 10.0), Param("x2", "uniform", 0.0, 15.0)),
    ),
    "hartmann6": Problem(
        name="hartmann6",
        optimum=-3.32237,
        max_epochs=9,
        trials=48,
        scale=(1.5,),
        noise=(0.1,),
        params=tuple(Param(f"x{j}", "uniform", 0.0, 1.0) for j in range(1, 7)),
    ),
    "conditional": Problem(
        name="conditional",
        optimum=0.05,
        max_epochs=9,
        trials=24,
        scale=(0.3,),
        noise=(0.01,),
        choice="optimizer",
        branches={
            "sgd": (Param("lr", "loguniform", 1e-3, 1e-1), Param("momentum", "uniform", 0.8, 0.99)),
            "adam": (Param("lr", "loguniform", 1e-4, 1e-2),),
        },
    ),
    "zdt1": Problem(
        name="zdt1",
        optimum=zdt1_ideal_hypervolume(),
        max_epochs=9,
        trials=40,
        scale=(0.3, 2.0),
        noise=(0.02, 0.1),
        params=tuple(Param(f"x{j}", "uniform", 0.0, 1.0) for j in range(1, ZDT1_DIMS + 1)),
        objectives=("f1", "f2"),
    ),
    # A real task: tuner's light CNN (16/32 channels, hidden 128) on an MNIST subset; the
    # objective is the validation error (1 - val_accuracy), no known optimum (0 is used).
    "mnist": Problem(
        name="mnist",
        optimum=0.0,
        max_epochs=4,
        trials=8,
        scale=(1.0,),
        noise=(0.0,),
        time_budget_s=120,
        params=(Param("lr", "loguniform", 1e-4, 3e-2), Param("dropout", "uniform", 0.0, 0.6)),
        synthetic=False,
    ),
}
MNIST_TRAIN_SUBSET = 4000  # images (10% of them held out for validation), seeded by the benchmark seed


class EpochCounter:
    """The epochs a sweep has spent, across the processes of one machine (a file under a
    lock): ``take()`` returns this epoch's 1-based number, so that the benchmark can cut
    every contestant's reports at the same budget, in the order the epochs were spent."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def take(self) -> int:
        with open(self.path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            spent = int(handle.read().strip() or 0) + 1
            handle.seek(0)
            handle.truncate()
            handle.write(str(spent))
            handle.flush()
            return spent

    def spent(self) -> int:
        try:
            return int(self.path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0


def synthetic_epoch(
    problem: Problem, point: dict[str, Any], epoch: int, seed: int, counter: EpochCounter, epoch_s: float
) -> dict[str, float]:
    """One epoch of a synthetic trial, as every contestant's trial runs it: take the epoch's
    number from the sweep's counter, spend ``epoch_s`` (a sleep, as a GPU-bound or torch
    epoch that releases the GIL), and return what the trial reports."""
    spent = counter.take()
    if epoch_s > 0:
        time.sleep(epoch_s)
    return {**problem.report(point, epoch, seed), "spent": spent, "at": time.time(), "epoch_of_trial": epoch}
