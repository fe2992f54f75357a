"""DEHB for Ray Tune: the searcher (a DEHB job per trial) and the scheduler that stops each
trial at its job's epochs. Imported by tuner/search/dehb.py's builders only (it imports Ray).

A trial's value for DEHB is the sweep metric at its job's last epoch (negated for ``max``:
DEHB minimises). A trial that ends before its epochs (an error, the time budget) completes
its job without a value, so its bracket does not wait for it forever.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from tuner.search.base import TIME_ATTR, Evaluated
from tuner.search.dehb_core import Dehb, Job, UnitSpace, epochs


class TuneDehb(Searcher):
    def __init__(
        self,
        space: UnitSpace,
        *,
        metric: str,
        mode: str,
        min_epochs: int,
        max_epochs: int,
        eta: float,
        seed: int,
        mutation_factor: float = 0.5,
        crossover_prob: float = 0.5,
    ):
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.dehb = Dehb(
            space.dims,
            min_epochs,
            max_epochs,
            eta=eta,
            seed=seed,
            mutation_factor=mutation_factor,
            crossover_prob=crossover_prob,
        )
        self.jobs: dict[str, Job] = {}  # trial id -> its job, until the trial ends
        self.budgets: dict[str, int] = {}  # trial id -> the epochs its job asks for

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # metric and mode come from the sweep

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        job = self.dehb.ask()
        self.jobs[trial_id] = job
        self.budgets[trial_id] = epochs(self.dehb.fidelities[job.fidelity])
        return self.space.config(job.config)

    def budget(self, trial_id: str) -> int | None:
        return self.budgets.get(trial_id)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        job = self.jobs.pop(trial_id, None)
        if job is None:
            return
        reached = result is not None and result.get(TIME_ATTR, 0) >= self.budgets[trial_id]
        value = result.get(self.metric) if reached and not error else None
        fitness = math.inf
        if isinstance(value, (int, float)) and math.isfinite(value):
            fitness = -value if self.mode == "max" else value
        self.dehb.tell(job, fitness)

    def seed(self, evaluated: list[Evaluated]) -> tuple[int, int]:
        """A warm start: an earlier sweep's trials (told, outside this space)."""
        sign = -1.0 if self.mode == "max" else 1.0
        known, outside = [], 0
        for trial in evaluated:
            vector = self.space.vector(trial.config)
            if vector is None or not trial.values:
                outside += 1
                continue
            at = {
                i: sign * trial.values[epochs(f) - 1]
                for i, f in enumerate(self.dehb.fidelities)
                if epochs(f) <= len(trial.values)
            }
            known.append((vector, at))
        self.dehb.seed_population(known)
        return len(known), outside

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_bytes(pickle.dumps(self.__dict__))

    def restore(self, checkpoint_path: str) -> None:
        self.__dict__.update(pickle.loads(Path(checkpoint_path).read_bytes()))


class DehbStopper(FIFOScheduler):
    """Stops a trial once it has trained the epochs of its DEHB job (``searcher`` set by
    ``DehbScheduler.pair``)."""

    searcher: TuneDehb | None = None

    def __init__(self, metric: str, mode: str):
        super().__init__()
        self._metric, self._mode = metric, mode

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # metric and mode come from the sweep

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        budget = self.searcher.budget(trial.trial_id) if self.searcher is not None else None
        if budget is not None and result.get(TIME_ATTR, 0) >= budget:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE
