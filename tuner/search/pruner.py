"""Optuna's pruners as tuner's ``pruner`` scheduler, for an Optuna objective run unchanged
(``objective:``): its ``trial.should_prune()`` is answered by the study's pruner
(tuner/search/define_by_run.py) from the values its ``trial.report`` calls gave, and a
``raise optuna.TrialPruned()`` ends the trial as stopped early, as in an Optuna study.
Ray Tune stops no trial itself (FIFO). With ``asha`` or ``median`` instead, Ray Tune's
scheduler stops a trial at its ``trial.report`` (which then does not return), and
``should_prune()`` answers False."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import Scheduler
from tuner.strict import fail


class PrunerScheduler(Scheduler):
    name: Literal["pruner"]
    pruner: Literal["median", "percentile", "successive_halving", "hyperband"] = "median"
    n_startup_trials: int = Field(5, ge=0)  # median, percentile: trials before any is pruned
    n_warmup_steps: int = Field(0, ge=0)  # median, percentile: steps of a trial before it may be pruned
    percentile: float = Field(25.0, gt=0, lt=100)  # percentile: keep trials above this percentile
    min_resource: int = Field(1, ge=1)  # successive_halving, hyperband: steps before the first rung
    reduction_factor: int = Field(3, ge=2)  # successive_halving, hyperband

    compares_several: ClassVar[bool] = False
    min_epochs: ClassVar[int] = 1
    legend: ClassVar[str] = "Optuna's pruner stopped the trials that raised TrialPruned"

    def check(self, sweep: Any) -> None:
        if sweep.objective is None:
            raise fail(
                "scheduler.name: 'pruner' answers an Optuna objective's trial.should_prune(), but the file has no "
                "objective; use asha or median for a trainable or command"
            )

    def build(self, sweep: Any) -> Any:
        from ray.tune.schedulers import FIFOScheduler

        return FIFOScheduler()  # the objective prunes itself, asking the study

    def study_pruner(self, sweep: Any) -> Any:
        import optuna

        pruners = optuna.pruners
        made = {
            "median": lambda: pruners.MedianPruner(self.n_startup_trials, self.n_warmup_steps),
            "percentile": lambda: pruners.PercentilePruner(self.percentile, self.n_startup_trials, self.n_warmup_steps),
            "successive_halving": lambda: pruners.SuccessiveHalvingPruner(
                min_resource=self.min_resource, reduction_factor=self.reduction_factor
            ),
            "hyperband": lambda: pruners.HyperbandPruner(
                min_resource=self.min_resource, max_resource=sweep.train.epochs, reduction_factor=self.reduction_factor
            ),
        }
        return made[self.pruner]()
