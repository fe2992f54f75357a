"""``searcher.warm_start``: an earlier sweep's finished trials, read from its folder before
anything is written, for the searcher to learn from before it proposes (Optuna is told
them as completed trials, with their values per epoch: tuner/search/registry.py)."""

from __future__ import annotations

from pathlib import Path

from tuner.errors import ConfigError, TunerError
from tuner.folder import constraints as constraining
from tuner.folder import records
from tuner.results.summaries import open_sweep, trial_summaries
from tuner.search.base import Evaluated
from tuner.sweepfile.schema import SweepConfig

ENDED = ("finished", "stopped_early")


def earlier_trials(sweep: SweepConfig) -> list[Evaluated]:
    """The trials of ``searcher.warm_start`` that ended with the sweep's metric; [] without one."""
    where = getattr(sweep.searcher, "warm_start", None)
    if where is None:
        return []
    try:
        earlier, folder = open_sweep(Path(where).expanduser())
    except TunerError as error:
        raise sweep.locate(ConfigError(f"searcher.warm_start: {error}")) from None
    if (earlier.metric, earlier.mode) != (sweep.metric, sweep.mode):
        raise sweep.locate(
            ConfigError(
                f"searcher.warm_start: {folder.where} {earlier.mode}imised {earlier.metric}, but this sweep "
                f"{sweep.mode}imises {sweep.metric}; its results would mislead the searcher"
            )
        )
    histories = records.trial_histories(folder)
    evaluated = []
    for trial in trial_summaries(earlier, folder, histories):
        rows = histories.get(trial.trial_id, [])
        values = tuple(float(row[sweep.metric]) for row in rows if isinstance(row.get(sweep.metric), (int, float)))
        if trial.status in ENDED and values:
            evaluated.append(Evaluated(dict(trial.config), values, _constraint_values(sweep, rows)))
    if not evaluated:
        raise sweep.locate(
            ConfigError(
                f"searcher.warm_start: {folder.where} has no trial that ended with {sweep.metric} to start from"
            )
        )
    return evaluated


def _constraint_values(sweep: SweepConfig, rows: list[dict]) -> dict[str, float]:
    """An earlier trial's values of this sweep's constraints, for a searcher that models them."""
    if not sweep.constraints or not sweep.searcher.models_constraints():
        return {}
    constraints = sweep.parsed_constraints
    return constraining.optuna_values(constraints, constraining.last_values(rows, (c.metric for c in constraints)))
