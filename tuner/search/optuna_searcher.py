"""Optuna's samplers (TPE, CMA-ES, GP, QMC, NSGA-II, random) as tuner's ``optuna`` searcher:
a study that holds the sweep's space define-by-run (tuner/search/tune_optuna.py), told the
earlier sweep's trials for a warm start."""

from __future__ import annotations

import copyreg
import threading
from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.ahead import import_ahead
from tuner.search.base import Evaluated, Searcher
from tuner.strict import fail

OPTUNA_SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "nsga2", "random")
# The samplers that read a trial's constraints (Trial.set_constraint) and model them
CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2")


class OptunaSearcher(Searcher):
    name: Literal["optuna"]
    sampler: Literal["tpe", "cmaes", "gp", "qmc", "nsga2", "random"] = "tpe"
    n_startup_trials: int = Field(4, ge=0)  # random trials before tpe, cmaes or gp take over
    population_size: int = Field(50, ge=2)  # nsga2: trials per generation (the first is random)
    tpe_after: int | None = Field(None, ge=1)  # gp: TPE proposes from this trial on (tuner/search/handover.py)

    takes_earlier_results: ClassVar[bool] = True
    answers_suggest: ClassVar[bool] = True

    def check(self, sweep: Any) -> None:
        if self.warm_start is not None and self.sampler == "qmc":
            raise fail("searcher.warm_start: the qmc sampler draws a fixed sequence and learns nothing from trials")
        if self.tpe_after is not None and self.sampler != "gp":
            raise fail(
                "searcher.tpe_after: {value} hands a Gaussian process's search over to TPE; "
                "it needs sampler: gp, not {sampler}",
                value=self.tpe_after,
                sampler=self.sampler,
            )

    def models_constraints(self) -> bool:
        return self.sampler in CONSTRAINED_SAMPLERS

    def single_objective_name(self) -> str | None:
        return "optuna's cmaes sampler" if self.sampler == "cmaes" else None

    def build(self, sweep: Any, max_concurrent: int) -> Any:
        return optuna_search(sweep, self.sampler)

    def holds_space(self, sweep: Any) -> bool:
        return True

    def study_sampler(self, sweep: Any) -> Any:
        return optuna_sampler(self.sampler, sweep.seed, self.n_startup_trials, self.population_size, self.tpe_after)

    def tell_earlier(self, search_alg: Any, evaluated: list[Evaluated]) -> tuple[int, int]:
        return warm_start(search_alg, evaluated)

    @property
    def described(self) -> str:
        handover = f", tpe from trial {self.tpe_after}" if self.tpe_after is not None else ""
        return f"optuna ({self.sampler}{handover})"


def optuna_sampler(
    name: str, seed: int, n_startup_trials: int, population_size: int = 50, tpe_after: int | None = None
) -> Any:
    """Optuna's sampler by the name the file gives (``searcher.sampler``); the GP hands over
    to TPE from trial ``tpe_after`` on, if given."""
    import optuna

    if name == "gp" and tpe_after is not None:
        from tuner.search.handover import GpThenTpe

        gp = optuna_sampler("gp", seed, n_startup_trials)
        return GpThenTpe(gp, optuna_sampler("tpe", seed, n_startup_trials), tpe_after)

    samplers = optuna.samplers
    builders = {
        "tpe": lambda: samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials),
        "cmaes": lambda: samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials),
        "gp": lambda: _gp(seed, n_startup_trials),
        "qmc": lambda: samplers.QMCSampler(seed=seed, scramble=True),
        "nsga2": lambda: samplers.NSGAIISampler(seed=seed, population_size=population_size),
        "random": lambda: samplers.RandomSampler(seed=seed),
    }
    return _picklable(builders[name]())


_RLOCK = type(threading.RLock())
_LOCKS = (type(threading.Lock()), _RLOCK)


def _picklable(sampler: Any) -> Any:
    """The sampler, which Tune pickles with the searcher (the Tuner's state at the start,
    the searcher's checkpoints, a resume) and copies. Optuna 5.1's genetic samplers (NSGA-II,
    NSGA-III) hold a thread lock, which neither pickle nor copy takes: their class is taken
    here (copyreg) without their locks, and given new ones when rebuilt."""
    if any(isinstance(value, _LOCKS) for value in vars(sampler).values()):
        copyreg.pickle(type(sampler), _without_locks)
    return sampler


def _without_locks(sampler: Any) -> tuple[Any, tuple[Any, ...]]:
    state = vars(sampler)
    locks = {key: isinstance(value, _RLOCK) for key, value in state.items() if isinstance(value, _LOCKS)}
    kept = {key: value for key, value in state.items() if key not in locks}
    return _rebuilt, (type(sampler), kept, locks)


def _rebuilt(cls: type, state: dict[str, Any], locks: dict[str, bool]) -> Any:
    sampler = cls.__new__(cls)
    sampler.__dict__.update(state)
    for key, reentrant in locks.items():
        setattr(sampler, key, threading.RLock() if reentrant else threading.Lock())
    return sampler


def _gp(seed: int, n_startup_trials: int) -> Any:
    """Optuna's GP sampler. What it imports at its first proposal (torch, SciPy's optimiser
    and quasi-random sampling: 0.9-1.3 s of that proposal in a sweep's driver, which imports
    torch ahead for the export, 2.5 s in a process without it) is imported now, on a thread,
    while the first trials start and propose at random: not in Tune's loop at the first
    proposal after them, which every trial waits for."""
    from optuna.samplers import GPSampler

    gp = ("gp", "acqf", "optim_mixed", "search_space", "prior")
    import_ahead(
        "torch", "scipy.optimize", "scipy.stats.qmc", *(f"optuna._gp.{m}" for m in gp), name="tuner-gp-imports"
    )
    return GPSampler(seed=seed, n_startup_trials=n_startup_trials)


def optuna_search(sweep: Any, sampler: str) -> Any:
    """Ray's OptunaSearch holding the sweep's space, with ``sampler``."""
    import warnings

    import optuna
    from optuna.exceptions import ExperimentalWarning

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per study in the sweep's output

    from tuner.search.tune_optuna import OptunaSpace, SpaceOptunaSearch

    s = sweep.searcher
    with warnings.catch_warnings():  # qmc, gp: "experimental" in Optuna's words; chosen in the file
        warnings.simplefilter("ignore", ExperimentalWarning)
        chosen = optuna_sampler(
            sampler,
            sweep.seed,
            getattr(s, "n_startup_trials", 4),
            getattr(s, "population_size", 50),
            getattr(s, "tpe_after", None),
        )
    space = OptunaSpace(sweep.param_specs())
    # cmaes, qmc, random learn nothing from them (cmaes warns at each trial): not told
    constraints = sweep.parsed_constraints if sweep.searcher.models_constraints() else ()
    if sweep.objectives:  # several: Optuna is told every one when a trial ends
        metric, mode = [o.metric for o in sweep.objectives], [o.mode for o in sweep.objectives]
        return SpaceOptunaSearch(space=space, metric=metric, mode=mode, sampler=chosen, constraints=constraints)
    return SpaceOptunaSearch(space=space, metric=sweep.metric, mode=sweep.mode, sampler=chosen, constraints=constraints)


def warm_start(search_alg: Any, evaluated: list[Evaluated]) -> tuple[int, int]:
    """Tell the Optuna searcher inside ``search_alg`` the earlier trials that lie in its space,
    before it proposes: (told, outside the space)."""
    import optuna

    searcher = getattr(search_alg, "searcher", search_alg)  # inside the ConcurrencyLimiter
    told = outside = 0
    for trial in evaluated:
        encoded = searcher._space.encode(trial.config)  # tuner/search/tune_optuna.py
        if encoded is None or not trial.values:
            outside += 1
            continue
        params, distributions = encoded
        searcher._ot_study.add_trial(  # Ray's add_evaluated_point refuses a define-by-run space
            optuna.trial.create_trial(
                params=params,
                distributions=distributions,
                value=trial.values[-1],
                intermediate_values=dict(enumerate(trial.values, start=1)),
                constraints=trial.constraints or None,  # GP wants every trial's or none
            )
        )
        told += 1
    return told, outside
