"""Searcher factory: a registry from name to builder.

``random`` and ``grid`` are Tune's variant generator (grid values expand to every
combination); the rest are model-based. Metric and mode reach them through TuneConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.spec import config as cfg


def _variant_generator(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=sweep.seed, max_concurrent=max_concurrent)


def _optuna(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    sampler = optuna.samplers.TPESampler(seed=sweep.seed, n_startup_trials=sweep.searcher.n_startup_trials)
    return OptunaSearch(sampler=sampler)


def _hyperopt(sweep: cfg.SweepConfig, max_concurrent: int) -> Any:
    from ray.tune.search.hyperopt import HyperOptSearch

    return HyperOptSearch(n_initial_points=sweep.searcher.n_initial_points, random_state_seed=sweep.seed)


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


def build_searcher(
    sweep: cfg.SweepConfig, max_concurrent: int, *, gpus_out_of_sight: bool = False, cpus_kept_free: bool = False
) -> Any:
    """The Tune search algorithm for a validated sweep, running at most ``max_concurrent`` trials.

    Random and grid trials wait for resources as PENDING, so only the user's own cap
    limits them (a tighter one would starve HyperBand's synchronous brackets) - unless
    Tune cannot see what a trial holds: a TorchTrainer's workers reserve their GPUs
    themselves (``gpus_out_of_sight``), or CPUs must stay free for a streaming data
    pipeline's tasks, which run outside every trial's reservation (``cpus_kept_free``).
    """
    from ray.tune.search import ConcurrencyLimiter, Searcher

    if sweep.searcher.name in ("random", "grid") and not gpus_out_of_sight and not cpus_kept_free:
        max_concurrent = sweep.trials.max_concurrent or 0
    searcher = SEARCHERS[sweep.searcher.name](sweep, max_concurrent)
    if isinstance(searcher, Searcher):  # model-based: propose only as many as can run
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent)
    return searcher
