"""Scheduler factory: a registry from name to builder. ``max_t`` is ``train.epochs``.

Every scheduler counts time in ``training_iteration`` (one per reported epoch), so
budgets stay right across pause/resume: a restored trial continues its iteration count
from the checkpoint Tune hands back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.spec import config as cfg
from tuner.spec import spaces

TIME_ATTR = "training_iteration"


def _fifo(sweep: cfg.SweepConfig) -> Any:
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()


def _asha(sweep: cfg.SweepConfig) -> Any:
    from ray.tune.schedulers import ASHAScheduler

    s = sweep.scheduler
    return ASHAScheduler(
        time_attr=TIME_ATTR,
        max_t=sweep.max_epochs,
        grace_period=s.grace_period,
        reduction_factor=s.reduction_factor,
        brackets=s.brackets,
    )


def _hyperband(sweep: cfg.SweepConfig) -> Any:
    from tuner.spec.hyperband import HyperBand  # Tune's, stopping trials no bracket will run again

    return HyperBand(time_attr=TIME_ATTR, max_t=sweep.max_epochs, reduction_factor=sweep.scheduler.reduction_factor)


def _median(sweep: cfg.SweepConfig) -> Any:
    from ray.tune.schedulers import MedianStoppingRule

    s = sweep.scheduler
    return MedianStoppingRule(
        time_attr=TIME_ATTR, grace_period=s.grace_period, min_samples_required=s.min_samples_required
    )


def pbt_mutations(sweep: cfg.SweepConfig) -> dict[str, Any]:
    """The configured mutations, else every non-constant parameter of the space."""
    if sweep.scheduler.mutations:
        specs = {k: spaces.parse_param(v) for k, v in sweep.scheduler.mutations.items()}
    else:
        specs = {k: s for k, s in sweep.param_specs().items() if s.kind not in ("constant", "grid")}
    return spaces.to_param_space(specs)


def _pbt(sweep: cfg.SweepConfig) -> Any:
    from ray.tune.schedulers import PopulationBasedTraining

    s = sweep.scheduler
    return PopulationBasedTraining(
        time_attr=TIME_ATTR,
        perturbation_interval=s.perturbation_interval,
        hyperparam_mutations=pbt_mutations(sweep),
        quantile_fraction=s.quantile_fraction,
        resample_probability=s.resample_probability,
    )


def pb2_bounds(sweep: cfg.SweepConfig) -> dict[str, list[float]]:
    """[low, high] of every numeric parameter of the space: where PB2's bandit explores."""
    bounds = {}
    for name, spec in sweep.param_specs().items():
        if spec.kind in spaces.RANGE_KINDS:
            high = spec.args[1] - 1 if spec.kind == "randint" else spec.args[1]
            bounds[name] = [spec.args[0], high]
    return bounds


def _pb2(sweep: cfg.SweepConfig) -> Any:
    try:
        import GPy  # noqa: F401
        import sklearn  # noqa: F401
        from ray.tune.schedulers.pb2 import PB2
    except ImportError as error:
        raise cfg.ConfigError(
            f"scheduler 'pb2' needs the optional packages GPy and scikit-learn ({error}); "
            "install them with: pip install 'tuner[pb2]'"
        ) from None
    s = sweep.scheduler
    return PB2(
        time_attr=TIME_ATTR,
        perturbation_interval=s.perturbation_interval,
        hyperparam_bounds=pb2_bounds(sweep),
        quantile_fraction=s.quantile_fraction,
    )


def _bohb(sweep: cfg.SweepConfig) -> Any:
    from tuner.spec.hyperband import BohbHyperBand  # Tune's, stopping trials no bracket will run again

    return BohbHyperBand(time_attr=TIME_ATTR, max_t=sweep.max_epochs, reduction_factor=sweep.scheduler.reduction_factor)


SCHEDULERS: dict[str, Callable[[cfg.SweepConfig], Any]] = {
    "fifo": _fifo,
    "asha": _asha,
    "hyperband": _hyperband,
    "median": _median,
    "pbt": _pbt,
    "pb2": _pb2,
    "bohb": _bohb,
}


def build_scheduler(sweep: cfg.SweepConfig) -> Any:
    """The Tune scheduler for a validated sweep (metric and mode come from TuneConfig)."""
    return SCHEDULERS[sweep.scheduler.name](sweep)
