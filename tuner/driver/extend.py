"""``tuner extend RUN --trials N``: N more trials on a sweep that ended, in its folder.

They run as a new Tune experiment beside the first (``tune-2/``, ``tune-3/``, ... see
tuner/folder/store.py), sharing the sweep's records: history, timeline, the MLflow parent
run (each new trial a nested run under it), ``best/`` exported again over every trial.
A model-based searcher goes on from its saved state (its model, the trials it was told,
its random state); the random searcher draws new points (seeded by the extension).
sweep.yaml then counts every trial.
"""

from __future__ import annotations

from typing import Any

from tuner.errors import TunerError


def extend_sweep(folder: str, trials: int, *, address: str | None = None, verbose: bool = False, **run: Any) -> Any:
    """Run ``trials`` more trials in the sweep folder ``folder``; returns its SweepOutcome."""
    from tuner.driver.sweep import run_sweep
    from tuner.results.summaries import open_sweep

    if trials < 1:
        raise TunerError(f"--trials: at least 1 more trial, but got {trials}")
    sweep, sweep_folder = open_sweep(folder)
    if sweep_folder.remote:
        raise TunerError(f"{sweep_folder.where}: extend works on a sweep folder on this machine's disk, not at a URI")
    whole = sweep.model_copy(
        update={"trials": sweep.trials.model_copy(update={"num_samples": sweep.trials.num_samples + trials})}
    )
    more = sweep.model_copy(update={"trials": sweep.trials.model_copy(update={"num_samples": trials})})
    return run_sweep(more, address=address, verbose=verbose, folder=sweep_folder.extended(), extension=whole, **run)
