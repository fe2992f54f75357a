"""Searcher factory: a registry from name to builder.

``random`` and ``grid`` are Tune's variant generator (grid values expand to every
combination); the rest are model-based. Metric and mode reach them through TuneConfig,
except for Optuna, which holds the space itself (tuner/spec/optuna_space.py).

A conditional space (a choice whose values carry parameters of their own) goes to Optuna
define-by-run (``random`` then uses Optuna's random sampler) or to HyperOpt's nested
choice; every searcher hands the trial plain names (``tuner.spec.spaces.flatten``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.spec import config as cfg
from tuner.spec import spaces


def _variant_generator(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    from ray.tune.search import BasicVariantGenerator

    if spaces.is_conditional(sweep.param_specs()):  # random draws through Optuna's define-by-run
        return _optuna(sweep, max_concurrent, sampler="random")

    return BasicVariantGenerator(random_state=sweep.seed, max_concurrent=max_concurrent)


def optuna_sampler(name: str, seed: int, n_startup_trials: int, population_size: int = 50) -> Any:
    """Optuna's sampler by the name the file gives (``searcher.sampler``)."""
    import optuna

    samplers = optuna.samplers
    builders = {
        "tpe": lambda: samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials),
        "cmaes": lambda: samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials),
        "gp": lambda: samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials),
        "qmc": lambda: samplers.QMCSampler(seed=seed, scramble=True),
        "nsga2": lambda: samplers.NSGAIISampler(seed=seed, population_size=population_size),
        "random": lambda: samplers.RandomSampler(seed=seed),
    }
    return builders[name]()


def _optuna(sweep: cfg.SweepConfig, max_concurrent: int, sampler: str | None = None) -> Any:
    import warnings

    import optuna
    from optuna.exceptions import ExperimentalWarning

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per study in the sweep's output

    from tuner.spec.optuna_space import OptunaSpace, SpaceOptunaSearch

    s = sweep.searcher
    with warnings.catch_warnings():  # qmc, gp: "experimental" in Optuna's words; chosen in the file
        warnings.simplefilter("ignore", ExperimentalWarning)
        chosen = optuna_sampler(
            sampler or s.sampler, sweep.seed, getattr(s, "n_startup_trials", 4), getattr(s, "population_size", 50)
        )
    space = OptunaSpace(sweep.param_specs())
    if sweep.objectives:  # several: Optuna is told every one when a trial ends
        metric, mode = [o.metric for o in sweep.objectives], [o.mode for o in sweep.objectives]
        return SpaceOptunaSearch(space=space, metric=metric, mode=mode, sampler=chosen)
    return SpaceOptunaSearch(space=space, metric=sweep.metric, mode=sweep.mode, sampler=chosen)


def _hyperopt(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    from ray.tune.search.hyperopt import HyperOptSearch

    kwargs = {"n_initial_points": sweep.searcher.n_initial_points, "random_state_seed": sweep.seed}
    if spaces.is_conditional(sweep.param_specs()):
        from tuner.spec.hyperopt_space import FlatHyperOptSearch

        return FlatHyperOptSearch(sweep.param_specs(), **kwargs)
    return HyperOptSearch(**kwargs)


def _bohb(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    try:
        import ConfigSpace  # noqa: F401
        import hpbandster  # noqa: F401
        from ray.tune.search.bohb import TuneBOHB
    except ImportError as error:
        raise cfg.ConfigError(
            f"searcher 'bohb' needs the optional packages hpbandster and ConfigSpace ({error}); "
            "install them with: pip install 'tuner[bohb]'"
        ) from None
    return TuneBOHB(seed=sweep.seed)


SEARCHERS: dict[str, Callable[[cfg.SweepConfig, int], Any]] = {
    "random": _variant_generator,
    "grid": _variant_generator,
    "optuna": _optuna,
    "hyperopt": _hyperopt,
    "bohb": _bohb,
}


def holds_space(sweep: cfg.SweepConfig) -> bool:
    """Whether the searcher takes the space itself (Optuna define-by-run), not Tune's param_space."""
    return sweep.searcher.name == "optuna" or (
        sweep.searcher.name == "random" and spaces.is_conditional(sweep.param_specs())
    )


def build_searcher(
    sweep: cfg.SweepConfig,
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
    from ray.tune.search import ConcurrencyLimiter, Searcher

    if draw:
        sweep = sweep.model_copy(update={"seed": sweep.seed + draw})
    slots = max_concurrent
    if sweep.searcher.name in ("random", "grid") and not gpus_out_of_sight and not cpus_kept_free:
        max_concurrent = sweep.trials.max_concurrent or 0
    searcher = SEARCHERS[sweep.searcher.name](sweep, max_concurrent)
    if not max_concurrent and isinstance(searcher, Searcher):  # random on a conditional space (Optuna's)
        # Proposed as trials can start, not num_samples up front (Tune would make every trial
        # first); HyperBand's paused trials stay live, so its brackets need them all at once.
        brackets = sweep.scheduler.name in ("hyperband", "bohb")
        max_concurrent = sweep.total_trials if brackets else max(1, slots)
    if isinstance(searcher, Searcher):  # model-based: propose only as many as can run
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent)
    return searcher


@dataclass(frozen=True)
class Evaluated:
    """A finished trial of an earlier sweep: its plain config, and its metric per epoch."""

    config: dict[str, Any]
    values: tuple[float, ...]  # the sweep metric at epochs 1, 2, ...; the last is its result


def warm_start(search_alg: Any, evaluated: list[Evaluated]) -> tuple[int, int]:
    """Tell the Optuna searcher inside ``search_alg`` the earlier trials that lie in its space,
    before it proposes: (told, outside the space)."""
    import optuna

    searcher = getattr(search_alg, "searcher", search_alg)  # inside the ConcurrencyLimiter
    told = outside = 0
    for trial in evaluated:
        encoded = searcher._space.encode(trial.config)  # tuner/spec/optuna_space.py
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
            )
        )
        told += 1
    return told, outside
