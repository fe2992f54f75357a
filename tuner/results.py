"""Read a sweep's output folder without Ray running: its config, trials and best trial.

"Best" means one thing everywhere (here, the export, MLflow): the sweep's metric and
mode over every epoch every trial reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.config import SweepConfig, load_sweep
from tuner.errors import TunerError
from tuner.sweep import SweepPaths


@dataclass
class TrialSummary:
    trial_id: str
    status: str  # finished, stopped_early, running, pending, paused, errored
    epochs: int
    config: dict[str, Any]
    best_epoch: int | None
    best_value: float | None
    last: dict[str, Any]


def open_sweep(folder: str | Path) -> tuple[SweepConfig, SweepPaths]:
    """The config that ran (``sweep.yaml``) and the paths, wherever the folder now is."""
    root = Path(folder).expanduser().resolve()
    config_file = root / "sweep.yaml"
    if not config_file.is_file():
        raise TunerError(f"{root} is not a sweep folder (no sweep.yaml); give runs/<sweep name>")
    sweep = load_sweep(str(config_file), [f"output_dir={root.parent}", f"name={root.name}"])
    return sweep, SweepPaths(root)


def analysis(sweep: SweepConfig, paths: SweepPaths) -> Any:
    from ray.tune import ExperimentAnalysis

    if not (paths.tune / "experiment_state.json").exists() and not list(paths.tune.glob("experiment_state*.json")):
        raise TunerError(f"{paths.root}: no Tune experiment state in {paths.tune}; did the sweep start?")
    return ExperimentAnalysis(str(paths.tune), default_metric=sweep.metric, default_mode=sweep.mode)


def trial_summaries(sweep: SweepConfig, paths: SweepPaths) -> list[TrialSummary]:
    from tuner.tracking import trial_histories

    experiment = analysis(sweep, paths)
    histories = trial_histories(paths.root)
    pick = max if sweep.mode == "max" else min
    summaries = []
    for trial in experiment.trials:
        records = histories.get(trial.trial_id, [])  # every reported epoch
        scored = [r for r in records if sweep.metric in r]
        best = pick(scored, key=lambda r: r[sweep.metric]) if scored else None
        epochs = int(records[-1]["training_iteration"]) if records else 0
        summaries.append(
            TrialSummary(
                trial_id=trial.trial_id,
                status=_status(trial.status, epochs, sweep.max_epochs),
                epochs=epochs,
                config=dict(trial.config),
                best_epoch=int(best["training_iteration"]) if best else None,
                best_value=float(best[sweep.metric]) if best else None,
                last=records[-1] if records else {},
            )
        )
    return summaries


def _status(tune_status: str, epochs: int, max_epochs: int) -> str:
    if tune_status == "TERMINATED":
        return "finished" if epochs >= max_epochs else "stopped_early"
    return {"ERROR": "errored", "RUNNING": "interrupted", "PAUSED": "paused", "PENDING": "pending"}.get(
        tune_status, tune_status.lower()
    )


def best_trial(sweep: SweepConfig, summaries: list[TrialSummary]) -> TrialSummary:
    scored = [s for s in summaries if s.best_value is not None]
    if not scored:
        raise TunerError(f"no trial of sweep {sweep.name!r} has reported {sweep.metric} yet")
    pick = max if sweep.mode == "max" else min
    return pick(scored, key=lambda s: s.best_value)


def result_grid(sweep: SweepConfig, paths: SweepPaths) -> Any:
    from ray.tune import ResultGrid

    return ResultGrid(analysis(sweep, paths))
