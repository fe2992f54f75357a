"""Every scheduler and searcher tuner has, by name (as Ray Tune's ``tune/schedulers/__init__.py``
lists its own), and what concerns a pair of them: the sweep file's union of their sections,
the checks of one against the other and the rest of the sweep, ``auto``'s pick, and
building the pair for Tune. Adding a method: its module in this package, its line here.

A conditional space (a choice whose values carry parameters of their own) goes to Optuna
define-by-run (``random`` then uses Optuna's random sampler) or to HyperOpt's nested
choice; every searcher hands the trial plain names (``tuner.search.spaces.flatten``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from tuner.search import auto
from tuner.search.asha import AshaScheduler
from tuner.search.auto import AutoSearcher
from tuner.search.base import Scheduler, Searcher
from tuner.search.bohb import BohbScheduler, BohbSearcher
from tuner.search.dehb import DehbScheduler, DehbSearcher
from tuner.search.fifo import FifoScheduler
from tuner.search.hyperband import HyperBandScheduler
from tuner.search.hyperopt_searcher import HyperOptSearcher
from tuner.search.median import MedianScheduler
from tuner.search.optuna_searcher import OptunaSearcher
from tuner.search.pasha import PashaScheduler
from tuner.search.pbt import Pb2Scheduler, PbtScheduler
from tuner.search.pruner import PrunerScheduler
from tuner.search.variants import GridSearcher, RandomSearcher
from tuner.strict import fail

SCHEDULERS: dict[str, type[Scheduler]] = {
    "fifo": FifoScheduler,
    "asha": AshaScheduler,
    "pasha": PashaScheduler,
    "hyperband": HyperBandScheduler,
    "median": MedianScheduler,
    "pbt": PbtScheduler,
    "pb2": Pb2Scheduler,
    "bohb": BohbScheduler,
    "dehb": DehbScheduler,
    "pruner": PrunerScheduler,
}
SEARCHERS: dict[str, type[Searcher]] = {
    "random": RandomSearcher,
    "grid": GridSearcher,
    "optuna": OptunaSearcher,
    "hyperopt": HyperOptSearcher,
    "bohb": BohbSearcher,
    "dehb": DehbSearcher,
    "auto": AutoSearcher,
}

# The sweep file's ``scheduler:`` and ``searcher:`` sections: one of these, by ``name``.
SchedulerConfig = Annotated[
    FifoScheduler
    | AshaScheduler
    | PashaScheduler
    | HyperBandScheduler
    | MedianScheduler
    | PbtScheduler
    | Pb2Scheduler
    | BohbScheduler
    | DehbScheduler
    | PrunerScheduler,
    Field(discriminator="name"),
]
SearcherConfig = Annotated[
    RandomSearcher | GridSearcher | OptunaSearcher | HyperOptSearcher | BohbSearcher | DehbSearcher | AutoSearcher,
    Field(discriminator="name"),
]
DEFAULT_SCHEDULER = FifoScheduler()
DEFAULT_SEARCHER = RandomSearcher()


def pick(sweep: Any) -> None:
    """``searcher: auto``: the searcher, and the scheduler unless the file names one, put in
    ``sweep`` (tuner/search/auto.py's rules); what and why kept for the sweep's first lines."""
    choice = auto.pick(
        sweep.param_specs(),
        trials=sweep.trials.num_samples,
        epochs=sweep.train.epochs,
        scheduler_given="scheduler" in sweep.model_fields_set,
        objectives=len(sweep.objectives),
        own_searcher=sweep.scheduler.own_searcher,
        define_by_run=sweep.objective is not None,
        time_budget_s=sweep.trials.time_budget_s,
    )
    searcher = dict(choice.searcher)
    if sweep.searcher.warm_start is not None:
        if not SEARCHERS[searcher["name"]].takes_earlier_results:
            raise fail(
                "searcher.warm_start: {reason}, which takes no earlier results; warm starts need Optuna "
                "(a space without grid values, a scheduler other than pbt, pb2 or bohb)",
                reason=choice.reason.split(";")[0],
            )
        searcher["warm_start"] = sweep.searcher.warm_start
    object.__setattr__(sweep, "searcher", TypeAdapter(SearcherConfig).validate_python(searcher))
    if choice.scheduler is not None:
        object.__setattr__(sweep, "scheduler", TypeAdapter(SchedulerConfig).validate_python(choice.scheduler))
        sweep.model_fields_set.add("scheduler")  # saved in sweep.yaml with the searcher
    sweep._picked = choice.reason


def check_objectives(sweep: Any) -> None:
    """Several objectives: a scheduler and a searcher that compare them."""
    names = [o.metric for o in sweep.objectives]
    if not sweep.scheduler.compares_several:
        raise fail(
            "scheduler.name: {scheduler!r} compares trials by one metric, but the sweep has {n} objectives ({names}); "
            "use fifo (every trial runs its epochs)",
            scheduler=sweep.scheduler.name,
            n=len(names),
            names=", ".join(names),
        )
    which = sweep.searcher.single_objective_name()
    if which is not None:
        raise fail(
            "searcher.name: {which} optimises one metric, but the sweep has {n} objectives; use optuna "
            "(sampler tpe, nsga2, gp, qmc or random), random or auto",
            which=which,
            n=len(names),
        )
    if sweep.searcher.warm_start is not None:
        raise fail(
            "searcher.warm_start: a warm start tells one metric's results; the sweep has {n} objectives", n=len(names)
        )


def check_pair(sweep: Any, conditional_at: str | None) -> None:
    """The searcher and the scheduler, against each other and the rest of the sweep.
    ``conditional_at``: where the space's first conditional choice is written, if it has one."""
    searcher, scheduler = sweep.searcher, sweep.scheduler
    specs = sweep.param_specs()
    kinds = {spec.kind for spec in specs.values()}
    if conditional_at is not None:
        if searcher.refuses_conditional is not None:
            takes = [n for n, s in SEARCHERS.items() if s.refuses_conditional is None and not s.picks]
            raise fail(
                "{where}: a conditional choice needs searcher {takes}; searcher {searcher!r} cannot take one ({why})",
                where=conditional_at,
                takes=", ".join(takes[:-1]) + " or " + takes[-1],
                searcher=searcher.name,
                why=searcher.refuses_conditional,
            )
        if not scheduler.takes_conditional:
            raise fail(
                "{where}: scheduler {scheduler!r} {why}, "
                "but a conditional choice's parameters exist in some trials only",
                where=conditional_at,
                scheduler=scheduler.name,
                why=scheduler.why_not_conditional,
            )
    if searcher.warm_start is not None and not searcher.takes_earlier_results:
        raise fail(
            "searcher.warm_start: searcher {searcher!r} cannot be told earlier results (Ray's {searcher} takes "
            "no evaluated points); use optuna or auto",
            searcher=searcher.name,
        )
    searcher.check(sweep)
    wanted = scheduler.own_searcher[0]["name"] if scheduler.own_searcher else None
    paired = wanted is not None and SEARCHERS[wanted].needs_scheduler == scheduler.name  # bohb with bohb
    if searcher.needs_scheduler not in (None, scheduler.name) or (paired and searcher.name != wanted):
        raise fail(
            "searcher.name / scheduler.name: {pair} searcher and {pair} scheduler go together, "
            "but got searcher {searcher!r} with scheduler {scheduler!r}",
            pair=searcher.needs_scheduler or scheduler.name,
            searcher=searcher.name,
            scheduler=scheduler.name,
        )
    if "grid" in kinds and not searcher.expands_grid:
        expand = [n for n, s in SEARCHERS.items() if s.expands_grid]
        raise fail(
            "space.params: grid values need the {expand} searcher, but got searcher {searcher!r} (use choice instead)",
            expand=" or ".join(expand),
            searcher=searcher.name,
        )
    if sweep.data.streaming is True and scheduler.pauses_trials:
        others = [n for n, s in SCHEDULERS.items() if not s.pauses_trials]
        raise fail(
            "data.streaming: true caps the trials running at once (CPUs stay free for Ray Data), which starves "
            "scheduler {scheduler!r}'s brackets; use {others}, or data.streaming: auto",
            scheduler=scheduler.name,
            others=", ".join(others[:-1]) + " or " + others[-1],
        )
    scheduler.check(sweep)
    grace = getattr(scheduler, "grace_period", None)
    if grace is not None and grace > sweep.train.epochs:
        raise fail(
            "scheduler.grace_period: must be <= train.epochs ({epochs}), but got {grace}",
            epochs=sweep.train.epochs,
            grace=grace,
        )
    if sweep.train.epochs < scheduler.min_epochs:
        raise fail(
            "train.epochs: scheduler {scheduler!r} needs at least {least} epochs to act, but got {epochs}",
            scheduler=scheduler.name,
            least=scheduler.min_epochs,
            epochs=sweep.train.epochs,
        )


def objective_default(sweep: Any) -> None:
    """An objective's searcher when the file names none: TPE as Optuna's ``TPESampler()`` is
    (10 random trials first), what an Optuna study would use, not random search."""
    if "searcher" not in sweep.model_fields_set:
        object.__setattr__(sweep, "searcher", OptunaSearcher(name="optuna", sampler="tpe", n_startup_trials=10))
        sweep.model_fields_set.add("searcher")  # saved in sweep.yaml


def check_objective(sweep: Any) -> None:
    """An Optuna objective (``objective:``): a searcher that answers its ``trial.suggest_*``
    calls, and a scheduler that needs no checkpoint of it (it keeps none)."""
    searcher, scheduler = sweep.searcher, sweep.scheduler
    if not searcher.answers_suggest:
        takes = [n for n, s in SEARCHERS.items() if s.answers_suggest]
        raise fail(
            "searcher.name: an objective's trial.suggest_* calls are answered by an Optuna sampler, which searcher "
            "{searcher!r} is not; use {takes} (or auto)",
            searcher=searcher.name,
            takes=" or ".join(takes),
        )
    if scheduler.pauses_trials or scheduler.clones_checkpoints or scheduler.own_searcher is not None:
        takes = [n for n, s in SCHEDULERS.items() if not (s.pauses_trials or s.clones_checkpoints or s.own_searcher)]
        raise fail(
            "scheduler.name: scheduler {scheduler!r} restarts trials from their checkpoints, which an objective "
            "does not keep; use {takes}",
            scheduler=scheduler.name,
            takes=", ".join(takes[:-1]) + " or " + takes[-1],
        )


def build_searcher(
    sweep: Any,
    max_concurrent: int,
    *,
    gpus_out_of_sight: bool = False,
    cpus_kept_free: bool = False,
    draw: int = 0,
) -> Any:
    """The Tune search algorithm for a validated sweep, running at most ``max_concurrent`` trials.

    Random and grid trials wait for resources as PENDING, so only the user's own cap
    limits them (a tighter one would starve HyperBand's synchronous brackets) - unless
    Tune cannot see what a trial holds: a TorchTrainer's workers reserve their GPUs
    themselves (``gpus_out_of_sight``), or CPUs must stay free for a streaming data
    pipeline's tasks, which run outside every trial's reservation (``cpus_kept_free``).
    ``draw``: the sweep's extension (``tuner extend``), seeding the random searcher anew.
    """
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search import Searcher as TuneSearcher

    if draw:
        sweep = sweep.model_copy(update={"seed": sweep.seed + draw})
    slots = max_concurrent
    if sweep.objective is not None:  # trials ask the study (define_by_run): as many as can run, for it to learn
        from ray.tune.search import BasicVariantGenerator

        return BasicVariantGenerator(max_concurrent=max(1, slots))
    if not sweep.searcher.model_based and not gpus_out_of_sight and not cpus_kept_free:
        max_concurrent = sweep.trials.max_concurrent or 0
    searcher = sweep.searcher.build(sweep, max_concurrent)
    if not max_concurrent and isinstance(searcher, TuneSearcher):  # random on a conditional space (Optuna's)
        # Proposed as trials can start, not num_samples up front (Tune would make every trial
        # first); HyperBand's paused trials stay live, so its brackets need them all at once.
        max_concurrent = sweep.total_trials if sweep.scheduler.pauses_trials else max(1, slots)
    if isinstance(searcher, TuneSearcher):  # model-based: propose only as many as can run
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent)
    return searcher


def build_scheduler(sweep: Any, search_alg: Any) -> Any:
    """The Tune scheduler for a validated sweep, paired with its search algorithm
    (``build_searcher``'s, restored or warm-started already)."""
    scheduler = sweep.scheduler.build(sweep)
    sweep.scheduler.pair(scheduler, search_alg)
    return scheduler
