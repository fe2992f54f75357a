"""DEHB (Awad, Mallik and Hutter, 2021): differential evolution inside Hyperband's brackets.
Its own searcher with its own scheduler, the two going together as BOHB's do: the
searcher hands each trial a configuration and a number of epochs (a DEHB job), the
scheduler stops the trial there. The algorithm is tuner/search/dehb_core.py (the reference
``dehb`` package's, NumPy only); Ray Tune's side is tuner/search/tune_dehb.py.

Ray Tune has no DEHB (ray#49408 went stale); this one resumes with the sweep (the
searcher's state is saved with Tune's) and takes a warm start (an earlier sweep's trials
seed each fidelity's population, best first).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import Evaluated, Scheduler, Searcher
from tuner.search.dehb_core import UnitSpace, epochs


class DehbSearcher(Searcher):
    """DEHB's differential evolution; each trial runs the epochs its job asks for."""

    name: Literal["dehb"]
    mutation_factor: float = Field(0.5, gt=0, le=2)
    crossover_prob: float = Field(0.5, ge=0, le=1)

    refuses_conditional: ClassVar[str | None] = "DE mutates a fixed vector of parameters"
    compares_several: ClassVar[bool] = False
    needs_scheduler: ClassVar[str | None] = "dehb"
    takes_earlier_results: ClassVar[bool] = True

    def build(self, sweep: Any, max_concurrent: int) -> Any:
        from tuner.search.tune_dehb import TuneDehb

        scheduler = sweep.scheduler
        return TuneDehb(
            UnitSpace(sweep.param_specs()),
            metric=sweep.metric,
            mode=sweep.mode,
            min_epochs=scheduler.grace_period,
            max_epochs=sweep.max_epochs,
            eta=scheduler.reduction_factor,
            seed=sweep.seed,
            mutation_factor=self.mutation_factor,
            crossover_prob=self.crossover_prob,
        )

    def holds_space(self, sweep: Any) -> bool:
        return True

    def tell_earlier(self, search_alg: Any, evaluated: list[Evaluated]) -> tuple[int, int]:
        return getattr(search_alg, "searcher", search_alg).seed(evaluated)


class DehbScheduler(Scheduler):
    """Stops each trial at the epochs its DEHB job asks for; needs the dehb searcher."""

    name: Literal["dehb"]
    grace_period: int = Field(1, ge=1)  # the smallest fidelity, in epochs
    reduction_factor: float = Field(3, gt=1)  # Hyperband's eta

    takes_conditional: ClassVar[bool] = False
    why_not_conditional: ClassVar[str] = "runs DEHB's fixed-vector differential evolution"
    own_searcher: ClassVar[tuple[dict[str, Any], str] | None] = (
        {"name": "dehb"},
        "scheduler dehb goes with DEHB's own searcher",
    )
    legend: ClassVar[str] = "dotted lines are DEHB's fidelities: a trial trains the epochs its job asks for"

    def build(self, sweep: Any) -> Any:
        from tuner.search.tune_dehb import DehbStopper

        return DehbStopper(sweep.metric, sweep.mode)

    def pair(self, scheduler: Any, search_alg: Any) -> None:
        scheduler.searcher = getattr(search_alg, "searcher", search_alg)  # inside the ConcurrencyLimiter

    def rungs(self, sweep: Any) -> list[int]:
        from tuner.search.dehb_core import Dehb

        fidelities = Dehb(1, self.grace_period, sweep.max_epochs, eta=self.reduction_factor).fidelities
        return sorted({epochs(f) for f in fidelities} - {sweep.max_epochs})
