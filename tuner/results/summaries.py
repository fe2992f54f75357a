"""Read a sweep's output folder without Ray running: its config, trials and best trial.

"Best" means one thing everywhere (here, the export, MLflow): ``tuner.folder.records.best_epoch``,
the sweep's metric and mode over every epoch every trial reported that meets the sweep's
constraints (tuner/folder/constraints.py).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import NoFeasibleTrial, TunerError
from tuner.folder import constraints as constraining
from tuner.folder import records, remote, store
from tuner.folder.store import SweepFolder
from tuner.search.define_by_run import RETURNED
from tuner.sweepfile.load import load_sweep
from tuner.sweepfile.schema import SweepConfig


@dataclass
class TrialSummary:
    trial_id: str
    status: str  # finished, stopped_early, running, interrupted, pending, paused, errored
    epochs: int
    config: dict[str, Any]
    best_epoch: int | None
    best_value: float | None
    last: dict[str, Any]
    error: str = ""  # an errored trial's reason, one line
    # the constraints it violates (``params < 200000 (got 421642)``); None: the sweep has no
    # constraints, or the trial has not reported (tuner/folder/constraints.py decides)
    violated: tuple[str, ...] | None = None

    @property
    def feasible(self) -> bool | None:
        """Whether it meets the sweep's constraints; None: no constraints, or no report yet."""
        return None if self.violated is None else not self.violated


def open_sweep(folder: str | Path) -> tuple[SweepConfig, SweepFolder]:
    """The config that ran (``sweep.yaml``) and the paths, wherever the folder now is.

    A folder at a storage URI is read through a working copy of tuner's records
    (tuner/folder/remote.py), removed when the command ends."""
    sweep_folder = SweepFolder.open(folder)
    # The folder's own name may be <name>-2 (a second run); the sweep's name stays.
    # The user's code it ran is its code/ (kept when it began), imported by the trials of a resume.
    kept_code = [f"code_dir={sweep_folder.code}"] if not sweep_folder.remote and sweep_folder.code.is_dir() else []
    sweep = load_sweep(
        str(sweep_folder.config), [f"output_dir={sweep_folder.output_dir}", *kept_code], import_code=False
    )
    return sweep, sweep_folder


def analysis(sweep: SweepConfig, folder: SweepFolder) -> Any:
    from ray.tune import ExperimentAnalysis

    if folder.remote:
        names = [f for f in remote.list_files(folder.tune_uri) if re.fullmatch(r"experiment_state.*\.json", f)]
        states = [remote.join(folder.tune_uri, f) for f in sorted(names)]
    else:
        states = [str(p) for p in sorted(folder.tune.glob("experiment_state*.json"))]
    if not states:
        raise TunerError(f"{folder.where}: no Tune experiment state in {folder.tune_uri}; did the sweep start?")
    # A trial that has not reported yet has no result file: Tune warns of each; it is no news here.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    try:
        return ExperimentAnalysis(folder.tune_uri, default_metric=sweep.metric, default_mode=sweep.mode)
    except Exception as error:  # Tune's loader raises whatever its parser met
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise TunerError(
            f"{states[-1]}: Tune's experiment state cannot be read ({type(error).__name__}: {reason})"
        ) from None


@dataclass
class _SavedTrial:
    """A trial as Tune's experiment state saved it: what status, best and report need."""

    trial_id: str
    status: str
    config: dict[str, Any]
    error_file: Path | None  # None: read the reason through Tune's own trial (remote sweeps)
    tune_trial: Any = None


def saved_trials(sweep: SweepConfig, folder: SweepFolder) -> list[_SavedTrial]:
    """Every trial of the sweep: of its first Tune experiment, then of each ``tuner extend``'s."""
    return [trial for part in folder.parts() for trial in _saved_trials_of(sweep, part)]


def _saved_trials_of(sweep: SweepConfig, folder: SweepFolder) -> list[_SavedTrial]:
    """The trials of Tune's newest experiment state, read as JSON: without importing Ray
    (over a second by itself) or loading every trial's result files, as Tune's
    ``ExperimentAnalysis`` does (minutes at thousands of trials). A remote sweep, or a
    state this reader does not know, goes through ``ExperimentAnalysis``."""
    states = [] if folder.remote else sorted(folder.tune.glob("experiment_state*.json"))
    try:
        saved = json.loads(states[-1].read_text())["trial_data"] if states else None
        trials = []
        for trial_json, metadata_json in saved or []:
            trial, metadata = json.loads(trial_json), json.loads(metadata_json)
            config = trial["config"]
            if not isinstance(config, dict) or "_type" in json.dumps(config):  # a pickled value
                raise ValueError("a config Tune pickled")
            error = metadata.get("error_filename") or "error.txt"
            trials.append(
                _SavedTrial(trial["trial_id"], trial["status"], config, folder.tune / trial["relative_logdir"] / error)
            )
        if saved is not None:
            return trials
    except (OSError, ValueError, KeyError, TypeError):  # let Tune's own loader say what is wrong
        pass
    return [
        _SavedTrial(trial.trial_id, trial.status, dict(trial.config), None, trial)
        for trial in analysis(sweep, folder).trials
    ]


def trial_summaries(
    sweep: SweepConfig, folder: SweepFolder, histories: dict[str, list[dict[str, Any]]] | None = None
) -> list[TrialSummary]:
    """Every trial Tune saved, with its records; ``histories`` when the caller read them
    already (a thousand trials' files take a quarter of a second to read)."""
    saved = saved_trials(sweep, folder)
    histories = records.trial_histories(folder) if histories is None else histories
    timeline = records.read_timeline(folder)
    last_event = {event["trial_id"]: event["event"] for event in timeline if event["event"] != "stall"}
    stalled = records.stall_reasons(timeline)
    running: bool | None = None  # whether a sweep holds the folder now; asked once, if needed
    summaries = []
    constraints = sweep.parsed_constraints
    for trial in saved:
        rows = histories.get(trial.trial_id, [])  # every reported epoch
        best = records.best_epoch({trial.trial_id: rows}, sweep.metric, sweep.mode)
        epochs = int(rows[-1]["training_iteration"]) if rows else 0
        tune_status = trial.status
        if tune_status in ("RUNNING", "PENDING") and last_event.get(trial.trial_id) == "error":
            # Tune can save its state before it handles a lost node's error; the driver's
            # timeline recorded the error as it happened. (resume retries it either way.)
            tune_status = "ERROR"
        elif tune_status == "PENDING" and last_event.get(trial.trial_id) == "start":
            # Tune saves a running trial as PENDING (to start it again on restore).
            tune_status = "RUNNING"
        status = _status(tune_status, epochs, sweep.max_epochs, returned=bool(rows and rows[-1].get(RETURNED)))
        if status == "interrupted" and (running := store.in_use(folder) if running is None else running):
            status = "running"
        summaries.append(
            TrialSummary(
                trial_id=trial.trial_id,
                status=status,
                epochs=epochs,
                config=trial.config,
                best_epoch=best.epoch if best else None,
                best_value=best.value if best else None,
                last=rows[-1] if rows else {},
                error=(stalled.get(trial.trial_id) or _error_reason(trial)) if tune_status == "ERROR" else "",
                violated=constraining.feasibility(constraints, rows).violated if constraints and rows else None,
            )
        )
    return summaries


UNDONE = ("interrupted", "pending", "paused")


def _error_reason(saved: _SavedTrial) -> str:
    """The last exception line of Tune's error.txt for the trial (e.g. a lost node)."""
    try:
        if saved.error_file is not None:
            text = saved.error_file.read_text(errors="replace")
        else:  # trial.error_file would ask Ray for its session folder: read the trial's storage.
            trial = saved.tune_trial
            name = trial.run_metadata.error_filename or "error.txt"
            with trial.storage.storage_filesystem.open_input_stream(f"{trial.path}/{name}") as stream:
                text = stream.read().decode(errors="replace")
    except OSError:
        text = ""
    return error_reason(text)


def error_reason(text: str) -> str:
    """One line of a Tune error file (or an error's text): its last exception line."""
    if not text.strip():
        return "(Tune recorded no reason)"
    lines = [line.strip() for line in text.splitlines() if re.match(r"^[\w.]+(Error|Exception)\b", line.strip())]
    reason = lines[-1] if lines else (text.strip().splitlines() or [""])[-1]
    reason = reason.removeprefix("tuner.trial.context.TrialCodeError: ")  # the user's code broke tuner's contract
    return reason if len(reason) <= 300 else reason[:297] + "..."


def _status(tune_status: str, epochs: int, max_epochs: int, returned: bool = False) -> str:
    """``returned``: an objective's trial that returned its value (tuner/trial/optuna_api.py)
    ended as it meant to, after however many reports."""
    if tune_status == "TERMINATED":
        return "finished" if epochs >= max_epochs or returned else "stopped_early"
    return {"ERROR": "errored", "RUNNING": "interrupted", "PAUSED": "paused", "PENDING": "pending"}.get(
        tune_status, tune_status.lower()
    )


def best_trial(sweep: SweepConfig, folder: SweepFolder, summaries: list[TrialSummary]) -> TrialSummary:
    """The summary of the trial ``tuner.folder.records.best_epoch`` names."""
    in_experiment = {s.trial_id for s in summaries}  # not the history of a trial lost in a crash
    histories = {k: v for k, v in records.trial_histories(folder).items() if k in in_experiment}
    best = sweep.best_epoch(histories)
    chosen = next((s for s in summaries if best is not None and s.trial_id == best.trial_id), None)
    if chosen is None and (reason := sweep.nothing_feasible(histories)):
        raise NoFeasibleTrial(f"{folder.where}: {reason}")
    if chosen is None:
        raise TunerError(f"{folder.where}: no trial of sweep {sweep.name!r} has reported {sweep.metric} yet")
    return chosen


def result_grid(sweep: SweepConfig, folder: SweepFolder) -> Any:
    from ray.tune import ResultGrid

    return ResultGrid(analysis(sweep, folder))


def all_results(sweep: SweepConfig, folder: SweepFolder) -> list[Any]:
    """Tune's results of every trial, across the sweep's extensions (``tuner extend``)."""
    return [result for part in folder.parts() for result in result_grid(sweep, part)]
