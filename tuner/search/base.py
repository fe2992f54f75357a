"""What every scheduler and searcher is: the section of the sweep file that names it (a
pydantic model whose ``name`` is its tag), its traits, its Ray Tune object (``build``) and
its rules against the rest of the sweep (``check``). The rest of tuner asks these traits and
never a name, so a method lives in one module of this package (tuner/search/registry.py
lists them), as Optuna's samplers live behind ``BaseSampler``.

``sweep`` below is a validated tuner.sweepfile.schema.SweepConfig (this package sits below
it: ``check`` runs inside its validator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tuner.strict import Strict

if TYPE_CHECKING:
    from tuner.sweepfile.schema import SweepConfig

TIME_ATTR = "training_iteration"  # every scheduler counts reported epochs (right across pause/resume)


@dataclass(frozen=True)
class Evaluated:
    """A finished trial of an earlier sweep: its plain config, and its metric per epoch."""

    config: dict[str, Any]
    values: tuple[float, ...]  # the sweep metric at epochs 1, 2, ...; the last is its result
    # this sweep's constraints' values (tuner/folder/constraints.py), for a searcher that models them
    constraints: dict[str, float] = field(default_factory=dict)


class Scheduler(Strict):
    """A trial scheduler: stops, pauses or mutates trials by their reported epochs."""

    name: str
    # Traits the sweep, the report and the trials ask instead of the name:
    pauses_trials: ClassVar[bool] = False  # synchronous brackets: paused trials hold their slots
    clones_checkpoints: ClassVar[bool] = False  # continues trials from others' old checkpoints
    takes_conditional: ClassVar[bool] = True  # a space with a conditional choice
    why_not_conditional: ClassVar[str] = ""  # what it does that a conditional choice defeats
    compares_several: ClassVar[bool] = False  # several objectives (FIFO only: it compares none)
    min_epochs: ClassVar[int] = 2  # below this it has nothing to act on
    # the searcher it needs, and why (auto picks it; any other is refused)
    own_searcher: ClassVar[tuple[dict[str, Any], str] | None] = None
    legend: ClassVar[str] = "the scheduler stops no trial early"  # the report's learning curves

    def build(self, sweep: SweepConfig) -> Any:
        """Ray Tune's scheduler (metric and mode come from TuneConfig)."""
        raise NotImplementedError

    def check(self, sweep: SweepConfig) -> None:
        """Refuse what cannot work with this scheduler (one ``fail`` line)."""

    def pair(self, scheduler: Any, search_alg: Any) -> None:
        """Introduce Ray Tune's scheduler (``build``) to the sweep's search algorithm, once
        both are built (DEHB's scheduler stops a trial at the epochs its searcher gave it)."""

    def rungs(self, sweep: SweepConfig) -> list[int]:
        """The epochs at which it compares trials (the report's dotted lines)."""
        return []

    def acts_at(self, sweep: SweepConfig) -> frozenset[int] | None:
        """The epochs whose reports it must see as the trial makes them; None: every one (it
        acts on any report, or by the clock). A trial that keeps its own checkpoints sends
        Tune only these, its first and last, and one every ``REPORT_EVERY_S``; the epochs between travel
        with the next one sent (tuner/trial/runner.py, ``_TuneSession.report``)."""
        return None

    def study_pruner(self, sweep: SweepConfig) -> Any:
        """The Optuna pruner that answers an objective's ``trial.should_prune()``; None: Ray
        Tune's scheduler stops the trial itself at a ``trial.report`` (``should_prune`` is False)."""
        return None

    def searched_elsewhere(self) -> dict[str, Any]:
        """Parameters it searches besides the space (PBT's mutations), checked like the space's."""
        return {}


class Searcher(Strict):
    """A search algorithm: proposes each trial's parameters."""

    # an earlier sweep folder (runs/<sweep>): its finished trials seed the searcher
    warm_start: str | None = None
    name: str

    model_based: ClassVar[bool] = True  # learns from trials (proposes only as many as can run)
    expands_grid: ClassVar[bool] = False  # takes {grid: [...]} values
    takes_earlier_results: ClassVar[bool] = False  # warm start
    compares_several: ClassVar[bool] = True  # several objectives
    # None: takes a conditional choice; else why it cannot
    refuses_conditional: ClassVar[str | None] = None
    needs_scheduler: ClassVar[str | None] = None  # the one scheduler it works with
    picks: ClassVar[bool] = False  # stands for another searcher, chosen when the file loads (auto)
    answers_suggest: ClassVar[bool] = False  # an Optuna objective's trial.suggest_* calls (study_sampler)

    def build(self, sweep: SweepConfig, max_concurrent: int) -> Any:
        """Ray Tune's search algorithm, running at most ``max_concurrent`` trials (0: no cap)."""
        raise NotImplementedError

    def check(self, sweep: SweepConfig) -> None:
        """Refuse what cannot work with this searcher (one ``fail`` line)."""

    def tell_earlier(self, search_alg: Any, evaluated: list[Evaluated]) -> tuple[int, int]:
        """Tell ``search_alg`` (built by ``build``) an earlier sweep's trials before it proposes:
        (told, outside this space). Only for ``takes_earlier_results``."""
        raise NotImplementedError

    def holds_space(self, sweep: SweepConfig) -> bool:
        """Whether it takes the space itself (define-by-run), not Tune's param_space."""
        return False

    def single_objective_name(self) -> str | None:
        """How a refusal of several objectives names it; None: it takes several."""
        return None if self.compares_several else f"searcher {self.name!r}"

    def models_constraints(self) -> bool:
        """Whether it is told each trial's ``constraints`` and learns where they hold (Optuna's
        TPE, GP, NSGA-II); else the constraints only filter the trials after they ran."""
        return False

    def study_sampler(self, sweep: SweepConfig) -> Any:
        """The Optuna sampler that answers an objective's ``trial.suggest_*`` calls
        (``objective:``, tuner/search/define_by_run.py); only for ``answers_suggest``."""
        raise NotImplementedError

    @property
    def described(self) -> str:
        """How the sweep's plan line names it."""
        return self.name
