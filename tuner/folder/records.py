"""The records tuner keeps in a sweep folder (tuner/folder/store.py owns the folder and its
writes): every epoch of every trial (``history/<trial>.jsonl``, the source of truth),
the timeline, the trial -> MLflow run map (``mlflow.json``), a user's data as the sweep
saw them, whole copies of Tune's own state, which checkpoints an ended trial keeps, and
the one definition of "best" that status, best, export, report and MLflow all use.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import EARLIER_EPOCHS, HELD_S, OWN_CHECKPOINT, RETURNED, pareto
from tuner.folder import constraints as constraining
from tuner.folder.store import (
    SweepFolder,
    append_line,
    append_lines,
    read_json,
    read_json_lines,
    write_atomic,
)

TRIAL_METRICS = ("train_loss", "val_loss", "val_accuracy", "lr", "compute_s", "images_per_s")
HISTORY_KEYS = (
    "trial_id",
    "training_iteration",
    "epoch",
    *TRIAL_METRICS,
    "resumed_from",
    "world_size",
    "train_images",  # the images an epoch trained on, every rank's share
    "nodes",
    "time_total_s",
    "entered_at",  # wall clock: the trial function began ...
    "first_step_at",  # ... and its first training step began (per start or restart)
    "checkpoint_dir_name",  # the epoch's checkpoint folder in the trial's Tune folder
    "threads",  # the torch threads the epoch trained with (more than its CPUs: spare cores lent)
)


# Keys of a Tune result that are not a trial's metrics: Tune's own, and tuner's bookkeeping.
NOT_METRICS = {
    *HISTORY_KEYS[len(TRIAL_METRICS) + 3 :],
    "trial_id",
    "training_iteration",
    "epoch",
    "time_this_iter_s",
    "time_total_s",
    "time_since_restore",
    "iterations_since_restore",
    "timesteps_total",
    "episodes_total",
    "timesteps_since_restore",
    "timestamp",
    "pid",
    "done",
    "should_checkpoint",
    OWN_CHECKPOINT,
    EARLIER_EPOCHS,
    "experiment_tag",
    "date",
    "hostname",
    "node_ip",
}


def trial_metrics(result: dict[str, Any]) -> list[str]:
    """The metrics a result carries: tuner's loop's, or whatever numbers a user's code reported."""
    own = [
        key
        for key, value in result.items()
        if key not in NOT_METRICS
        and key not in TRIAL_METRICS
        and not key.startswith("config/")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    ]
    return [*(key for key in TRIAL_METRICS if key in result), *sorted(own)]


# Tune's keys of a result that name its trial and process, not its epoch: an earlier epoch
# carried by the result (EARLIER_EPOCHS) has them too.
_TUNE_KEYS = ("trial_id", "config", "experiment_tag", "date", "timestamp", "pid", "hostname", "node_ip")


def epochs_in(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The epochs one Tune result brings, in order: the ones its trial held back (sent
    together, tuner.trial.runner's ``_TuneSession.report``), each as Tune would have
    reported it alone (its own metrics, the result's Tune keys, its ``time_total_s``),
    then the result itself. Every record of an epoch (the history, MLflow, TensorBoard,
    the progress view) is made from these."""
    earlier = result.get(EARLIER_EPOCHS)
    if not earlier:
        return [result]
    tune = {key: result[key] for key in _TUNE_KEYS if key in result}
    total = float(result.get("time_total_s") or 0.0)
    epochs = [
        {
            **tune,
            **{key: value for key, value in epoch.items() if key != HELD_S},
            "time_total_s": max(0.0, total - float(epoch.get(HELD_S) or 0.0)),
            "done": False,
        }
        for epoch in earlier
    ]
    return [*epochs, {key: value for key, value in result.items() if key != EARLIER_EPOCHS}]


def _plain(value: Any) -> Any:
    """numpy scalars to Python values, for JSON."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def history_file(folder: SweepFolder, trial_id: str) -> Path:
    return folder.history / f"{trial_id}.jsonl"


def append_history(
    folder: SweepFolder, trial_id: str, result: dict[str, Any], last_epochs: dict[str, int] | None = None
) -> bool:
    """Append one epoch to ``history/<trial>.jsonl``; False if it replaced re-run epochs.

    Tune's own result.json is staged in Ray's session folder and copied back stale when
    a trial restarts (PBT, retries, resume), losing epochs; this log is written by the
    driver as each result arrives. ``last_epochs`` (trial id -> the last epoch written),
    kept by the one writer of the histories, spares reading the file back for an epoch
    that follows it.
    """
    return append_epochs(folder, trial_id, [result], last_epochs)


def append_epochs(
    folder: SweepFolder, trial_id: str, results: list[dict[str, Any]], last_epochs: dict[str, int] | None = None
) -> bool:
    """``append_history`` for the epochs of one Tune result (``epochs_in``: in order), in one write."""
    path = history_file(folder, trial_id)
    new = [_history_row(result) for result in results]
    first = new[0]["training_iteration"]
    known = last_epochs.get(trial_id) if last_epochs is not None else None
    rows = read_json_lines(path) if known is None or first <= known else []
    appended = not any(old["training_iteration"] >= first for old in rows)
    if appended:
        append_lines(path, new)
    else:
        # A restored trial re-ran epochs whose checkpoints were lost (a crash before
        # Tune saved its state): the re-run is the lineage that continues, and the one
        # whose checkpoints exist, so it replaces them.
        kept = [old for old in rows if old["training_iteration"] < first]
        write_atomic(path, "".join(json.dumps(row) + "\n" for row in [*kept, *new]))
    if last_epochs is not None:
        last_epochs[trial_id] = new[-1]["training_iteration"]
    return appended


def _history_row(result: dict[str, Any]) -> dict[str, Any]:
    row = {key: _plain(result[key]) for key in (*HISTORY_KEYS, *trial_metrics(result)) if key in result}
    row["training_iteration"] = int(result["training_iteration"])
    if result.get(OWN_CHECKPOINT):  # the trial's own (Tune's key names only those Tune kept)
        row["checkpoint_dir_name"] = result[OWN_CHECKPOINT]
    row["reported_at"] = time.time()  # when the driver had it: the report's wall-time axis
    return row


def recorded_checkpoints(root: str | Path, trial_id: str) -> set[str]:
    """The checkpoint folders of a trial whose epochs the sweep's history holds (``root``: the
    sweep folder on this machine's disk): what a restarted trial that keeps its own may
    resume from (tuner.trial.session.latest_own_checkpoint)."""
    rows = read_json_lines(history_file(SweepFolder(Path(root)), trial_id))
    return {row["checkpoint_dir_name"] for row in rows if row.get("checkpoint_dir_name")}


def trial_histories(folder: SweepFolder) -> dict[str, list[dict[str, Any]]]:
    """Every epoch every trial reported, by trial id (sorted), in order."""
    histories = {}
    for path in sorted(folder.history.glob("*.jsonl")):
        rows = read_json_lines(path)
        for number, row in enumerate(rows, start=1):
            if not isinstance(row.get("training_iteration"), int):
                raise TunerError(f"{path}:{number}: a history row without its epoch (training_iteration)")
        histories[path.stem] = rows
    return histories


def append_timeline(folder: SweepFolder, trial_id: str, event: str, **extra: Any) -> None:
    append_line(folder.timeline, {"time": time.time(), "trial_id": trial_id, "event": event, **extra})


def read_timeline(folder: SweepFolder) -> list[dict[str, Any]]:
    return read_json_lines(folder.timeline)


def stall_reasons(events: list[dict[str, Any]]) -> dict[str, str]:
    """Trial id -> why the stall watchdog (tuner/driver/stalls.py) stopped it last, for the
    trials not started again since: the reason their latest failure had."""
    reasons: dict[str, str] = {}
    for event in events:
        if event.get("event") == "stall":
            reasons[event["trial_id"]] = str(event.get("reason", "stalled"))
        elif event.get("event") == "start":
            reasons.pop(event["trial_id"], None)
    return reasons


def write_data_description(folder: SweepFolder, description: dict[str, Any]) -> None:
    write_atomic(folder.data_description, json.dumps(description, indent=2))


def read_data_description(folder: SweepFolder) -> dict[str, Any] | None:
    """What a sweep on a user's own data recorded of them at its start (None for built-in
    sets and folders from before it was recorded)."""
    if not folder.data_description.exists():
        return None
    description = read_json(folder.data_description, what="data description")
    if not isinstance(description.get("data"), dict):
        raise TunerError(f"{folder.data_description}: not a readable data description (no 'data')")
    return description


def read_mlflow_state(folder: SweepFolder) -> dict[str, Any]:
    """The trial -> MLflow run map (empty before the first write)."""
    if not folder.mlflow_state.exists():
        return {}
    state = read_json(folder.mlflow_state, what="MLflow run map")
    for key, kind in (("tracking_uri", str), ("parent_run_id", str), ("trials", dict)):
        if key in state and not isinstance(state[key], kind):
            raise TunerError(f"{folder.mlflow_state}: not a readable MLflow run map ({key} is not a {kind.__name__})")
    return state


def write_mlflow_state(folder: SweepFolder, state: dict[str, Any]) -> None:
    write_atomic(folder.mlflow_state, json.dumps(state, indent=2))


MLFLOW_BEHIND = "mlflow.behind"  # in the sweep folder while MLflow lacks records the history has


def note_mlflow_behind(folder: SweepFolder, why: str) -> None:
    write_atomic(folder.root / MLFLOW_BEHIND, why + "\n")


def mlflow_behind(folder: SweepFolder) -> str | None:
    """Why MLflow lacks some of the sweep's records (its server was away), or None."""
    try:
        return (folder.root / MLFLOW_BEHIND).read_text().strip() or "unreachable"
    except OSError:
        return None


def mlflow_caught_up(folder: SweepFolder) -> None:
    (folder.root / MLFLOW_BEHIND).unlink(missing_ok=True)


# --- the one definition of "best" ---------------------------------------------------------------
@dataclass(frozen=True)
class BestEpoch:
    trial_id: str
    epoch: int  # Tune's training_iteration
    value: float
    row: dict[str, Any]
    rule: str = ""  # several objectives: how it was taken from the Pareto front (tuner/folder/pareto.py)


def _judged(histories: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The rows a sweep is judged by. A sweep whose trials return their value (an Optuna
    objective's), as its study judges it: the returned values of the trials that completed
    (what a trial reported on the way was for its pruner). Until one has, and in any other
    sweep: every epoch of every trial, each with its checkpoint."""
    returned = {trial_id: [row for row in rows if row.get(RETURNED)] for trial_id, rows in histories.items()}
    return {trial_id: rows for trial_id, rows in returned.items() if rows} if any(returned.values()) else histories


def best_epoch(
    histories: dict[str, list[dict[str, Any]]],
    metric: str,
    mode: str,
    objectives: Sequence[tuple[str, str]] = (),
    rule: pareto.Rule | None = None,
    constraints: Sequence[constraining.Constraint] = (),
) -> BestEpoch | None:
    """The sweep's metric, by its mode, over every epoch of every feasible trial (every
    trial without ``constraints``; tuner/folder/constraints.py decides).

    Ties go to the first in trial-id order, then epoch order, so every caller (status,
    best, export, MLflow) names the same trial and epoch. With several ``objectives``
    (metric is the first): the point ``rule`` takes from the front of every trial's best
    epoch by the first (``pareto_points``).
    """
    histories = _judged(constraining.feasible_only(histories, constraints))
    if objectives:
        points = pareto_points(histories, metric, mode, objectives)
        if not points:
            return None
        chosen, applied = pareto.choose(points, objectives, rule or pareto.Rule())
        return dataclasses.replace(chosen, rule=applied)
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)
    best: BestEpoch | None = None
    for trial_id in sorted(histories):
        for row in histories[trial_id]:
            value = row.get(metric)
            if not isinstance(value, (int, float)) or value != value:  # absent or NaN
                continue
            if best is None or better(value, best.value):
                best = BestEpoch(trial_id, int(row["training_iteration"]), float(value), row)
    return best


def pareto_points(
    histories: dict[str, list[dict[str, Any]]], metric: str, mode: str, objectives: Sequence[tuple[str, str]]
) -> list[BestEpoch]:
    """Each trial's best epoch by ``metric``, where that row holds every objective: the
    candidates of the Pareto front (the front itself: ``pareto.front``)."""
    points = []
    for trial_id in sorted(histories):
        best = best_epoch({trial_id: histories[trial_id]}, metric, mode)
        if best is not None and all(_number(best.row.get(name)) for name, _ in objectives):
            points.append(best)
    return points


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


STATE_COPY_SUFFIX = ".tuner-copy"


STATE_COPY_EVERY_S = 5.0  # the least time between two copies (more when a copy takes long)


def keep_state_copy(folder: SweepFolder, seen: dict[str, float], force: bool = False) -> None:
    """Keep a whole copy of Tune's experiment state as Tune rewrites it: Tune writes the
    file in place, so a full disk can leave it cut short, and resume needs it.

    Checking a copy is whole means parsing it, and the state grows with the trials (a
    third of the driver's time at a few hundred trials when it was copied at every
    rewrite), so a copy waits ``STATE_COPY_EVERY_S``, or 19 times what the last one took
    (at most 5% of the driver's time); the sweep's end copies it at once (``force``). A
    copy a few seconds old resumes the sweep as the state would have a few seconds before."""
    now = time.monotonic()
    due = force or now >= seen.get("", 0.0)
    if not due and len(seen) > 1:
        return  # (not even a listing: tune/ holds a folder per trial, and this runs every step)
    states = list(folder.tune.glob("experiment_state*.json"))
    if not due and all(state.name in seen for state in states):
        return  # (a new state file is copied at once)
    for state in states:
        try:
            stamp = state.stat().st_mtime_ns
        except OSError:
            continue  # gone
        if seen.get(state.name) == stamp:
            continue
        text = _whole_json(state)
        if text is None:
            continue  # being written, or cut short: keep the last whole copy
        write_atomic(state.with_name(state.name + STATE_COPY_SUFFIX), text)
        seen[state.name] = stamp
    seen[""] = time.monotonic() + max(STATE_COPY_EVERY_S, 19 * (time.monotonic() - now))


def recover_state(folder: SweepFolder) -> list[Path]:
    """Put back the last whole copy of any Tune state file that was cut short; returns them."""
    recovered = []
    for state in folder.tune.glob("experiment_state*.json"):
        if _whole_json(state) is not None:
            continue
        copy = _whole_json(state.with_name(state.name + STATE_COPY_SUFFIX))
        if copy is not None:
            write_atomic(state, copy)
            recovered.append(state)
    return recovered


def state_saved_at(folder: SweepFolder) -> float:
    """When Tune last wrote its experiment state (0 where it cannot be seen here: a sweep
    at a storage URI prunes at its end)."""
    times = []
    for state in folder.tune.glob("experiment_state*.json") if folder.tune.is_dir() else []:
        try:
            times.append(state.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _whole_json(path: Path) -> str | None:
    """The text of ``path`` if it is a whole JSON document, else None."""
    try:
        text = path.read_text()
        json.loads(text)
    except (ValueError, OSError):
        return None
    return text


def kept_checkpoints(rows: list[dict[str, Any]], keep: int, metric: str, mode: str) -> set[str]:
    """The checkpoint folders an ended trial keeps: its ``keep`` best epochs by the metric
    and its last (as Tune's ``num_to_keep`` would)."""
    named = [row for row in rows if row.get("checkpoint_dir_name")]
    scored = [row for row in named if isinstance(row.get(metric), (int, float))]
    best = sorted(scored, key=lambda row: row[metric], reverse=mode == "max")[:keep]
    return {row["checkpoint_dir_name"] for row in [*best, *named[-1:]]}


def prune_checkpoints(filesystem: Any, trial_path: str, kept: set[str]) -> int:
    """Delete a trial's checkpoint folders other than ``kept``, and any half-written one of its
    own that a killed trial left (tuner.trial.session: ``write_own_checkpoint``'s copy, or
    ``staged_checkpoint``'s folder); returns how many."""
    import pyarrow.fs

    found = filesystem.get_file_info(pyarrow.fs.FileSelector(trial_path, allow_not_found=True))
    gone = 0
    for info in found:
        name = info.base_name
        half_copied = name.startswith(".checkpoint_") and name.endswith(".part")
        if info.type == pyarrow.fs.FileType.Directory and (name.startswith("checkpoint_") or half_copied):
            if name not in kept:
                filesystem.delete_dir(info.path)
                gone += 1
    return gone
