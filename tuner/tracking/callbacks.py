"""The Tune callbacks that record a sweep's trials: MLflow (one writer, a thread or a
process, in event order), TensorBoard (event files written in place) and Tune's own JSON
and CSV files, these three written off Tune's loop (``LoggedLater``).

Tune pickles its callbacks with the experiment, and a resumed sweep gets them back from
that pickle: each holds only the config and folder, and opens what it writes to when
Tune sets it up.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, LoggerCallback, TBXLoggerCallback
from ray.tune.logger.tensorboardx import VALID_SUMMARY_TYPES
from ray.tune.utils import flatten_dict
from tensorboardX import SummaryWriter
from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import directory_check
from tensorboardX.summary import _clean_tag
from tensorboardX.writer import FileWriter

from tuner.folder import records, store
from tuner.folder.records import NOT_METRICS
from tuner.folder.store import SweepFolder
from tuner.later import TRIAL_FILES
from tuner.search.define_by_run import RETURNED
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import writer
from tuner.tracking.mlflow_runs import FLUSH_S, _plain, sweep_uri
from tuner.tracking.writer import WriterProcess, WriterThread


class MlflowTrials(Callback):
    """A Tune callback that mirrors trial events into the sweep's MLflow record.

    Every MLflow write happens in the sweep's writer (tuner/tracking/writer.py: a thread of
    the driver for a sweep of few trials, a process of its own for many), in the order of
    the events, so that Tune's loop (which every trial waits on: a trial's report returns
    only once the driver has handled it) never waits for sqlite, nor, from a process, for
    the GIL while SQLAlchemy holds it. A write that failed is raised at the next event, and
    at the sweep's end, which waits for every write.

    It holds only the config and folder (it is pickled with the experiment, for
    resume) and starts its writer in ``setup``, which Tune calls on every (re)start.
    """

    def __init__(self, sweep: SweepConfig, folder: SweepFolder) -> None:
        self.sweep, self.folder = sweep, folder
        self.writer: WriterThread | WriterProcess | None = None

    def setup(self, **info: Any) -> None:
        folder = store.current(self.folder)
        self.writer = writer.start(self.sweep, folder, sweep_uri(self.sweep, folder))
        self.ended_one = False

    def on_step_end(self, iteration, trials, **info):
        self.writer.check()  # the writer's lines shown, a failed write raised, between events too

    def on_trial_start(self, iteration, trials, trial, **info):
        self.writer.send("trial_start", trial.trial_id, _values(trial.config))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        epochs = [
            {k: epoch[k] for k in ("training_iteration", *records.trial_metrics(epoch)) if k in epoch}
            for epoch in records.epochs_in(result)
        ]
        self.writer.send("result", trial.trial_id, _values(trial.config), *epochs)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, _status(trial, self.sweep.max_epochs, ended=True, folder=self.folder))
        if not self.ended_one:  # the best model's logging (at the sweep's end, by the writer) made ready
            self.ended_one = True
            self.writer.send("ready_model_logging")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._tag_stall(trial)
        self._end(trial, "errored")

    def _tag_stall(self, trial: Any) -> None:
        """A trial the stall watchdog stopped (tuner/driver/stalls.py): its run says so and why."""
        reason = records.stall_reasons(records.read_timeline(store.current(self.folder))).get(trial.trial_id)
        if reason:
            self.writer.send("stalled", trial.trial_id, _values(trial.config), reason)

    def _end(self, trial: Any, status: str) -> None:
        self.writer.send("end", trial.trial_id, _values(trial.config), status)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._tag_stall(trial)
        self.writer.send("retrying", trial.trial_id, _values(trial.config))

    def on_experiment_end(self, trials, **info):  # finished, failed or interrupted
        ended = [(t.trial_id, _values(t.config), _status(t, self.sweep.max_epochs, folder=self.folder)) for t in trials]
        try:
            self.writer.send("experiment_end", ended)
        finally:
            if not writer.hold(self.writer):  # the sweep's driver makes its last writes through it
                self.writer.close()

    def __getstate__(self) -> dict[str, Any]:  # the rest is made anew, in setup()
        return {"sweep": self.sweep, "folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Only these two: a sweep that an earlier tuner pickled has the fields of its time.
        self.__init__(state["sweep"], state["folder"] if "folder" in state else state["paths"])  # before issue 40


def _values(config: dict[str, Any]) -> dict[str, str]:
    """A trial's values as its MLflow run's params take them: text (so that whatever a
    config holds crosses to the writer)."""
    return {str(name): str(_plain(value)) for name, value in config.items()}


def _status(trial: Any, max_epochs: int, ended: bool = False, folder: SweepFolder | None = None) -> str | None:
    """How an ended trial ended, as its run's ``tuner.status`` says (and ``tuner status``:
    tuner/results/summaries.py); None: it has not. ``ended``: Tune says it completed (its
    status may not say TERMINATED yet).

    A trial that keeps its own checkpoints and was resumed from the one of its last epoch
    ends without a report, and Tune's last result is then the one its saved state had, an
    epoch or more behind: the history (``folder``) has every epoch."""
    if trial.status == "ERROR":
        return "errored"
    if trial.status != "TERMINATED" and not ended:
        return None
    last = trial.last_result or {}
    if int(last.get("training_iteration", 0)) >= max_epochs or last.get(RETURNED):
        return "finished"
    rows = store.read_json_lines(records.history_file(store.current(folder), trial.trial_id)) if folder else []
    done = rows and (max(int(row["training_iteration"]) for row in rows) >= max_epochs or rows[-1].get(RETURNED))
    return "finished" if done else "stopped_early"


# --- the trials' files: TensorBoard, Tune's JSON and CSV ---------------------------------------
class LoggedLater(LoggerCallback):
    """A Tune logger whose writes are made on the driver's thread for the trials' files
    (``tuner.later.TRIAL_FILES``), in the order of Tune's events, not in Tune's loop: each
    trial's start and end opened and closed 3 files there (7 ms a trial at 300 trials,
    mostly file system calls) between one trial and the next, where both slots wait on the
    loop. A write that
    failed is raised at a later event; the sweep's end (``on_experiment_end``) waits for
    every write and leaves one that failed to ``TrialFilesWritten``, the last callback, so
    that the other callbacks' ends (MLflow's, the placement groups') still run.

    Only hooks whose Trial fields do not change after the event are handed over: a trial's
    folder, config and values; the result is handed over as a copy."""

    def on_trial_start(self, iteration, trials, trial, **info):
        TRIAL_FILES.do(super().on_trial_start, iteration, trials, trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # (a copy: Tune lets a callback change the result in place, and keeps it as the last)
        TRIAL_FILES.do(super().on_trial_result, iteration, trials, trial, dict(result))

    def on_trial_complete(self, iteration, trials, trial, **info):
        TRIAL_FILES.do(super().on_trial_complete, iteration, trials, trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        TRIAL_FILES.do(super().on_trial_error, iteration, trials, trial)

    def on_experiment_end(self, trials, **info):
        TRIAL_FILES.do(super().on_experiment_end, trials)
        TRIAL_FILES.wait(raising=False)

    def written(self) -> None:
        """Until every trial file's write handed over so far is made; raises one that failed."""
        TRIAL_FILES.wait()


class TrialFilesWritten(Callback):
    """The last of the sweep's callbacks: every trial file's write made before Tune saves its
    state, and at the sweep's end a write that failed raised (``LoggedLater``), once every
    other callback has ended.

    Tune's loggers write into the trials' folders in Ray's session folder, which Tune copies
    to the sweep's folder each time it saves its state (its last save comes before the
    callbacks' ends): a write still on the thread then was missing from the sweep's copy
    (a trial's results and HParams, once in CI). Tune asks every callback for its state
    (``get_state``) just before it saves."""

    def get_state(self) -> None:
        TRIAL_FILES.wait(raising=False)  # (a failure stays for a later event or the end)
        return None

    def on_experiment_end(self, trials, **info):
        TRIAL_FILES.wait()


class TuneJson(LoggedLater, JsonLoggerCallback):
    """Tune's ``params.json``, ``params.pkl`` and ``result.json`` in each trial's folder,
    written off the loop (given to Tune, it takes the place of its default one)."""


class TuneCsv(LoggedLater, CSVLoggerCallback):
    """Tune's ``progress.csv`` in each trial's folder, written off the loop."""


# --- TensorBoard ------------------------------------------------------------------------------
class InPlaceEvents:
    """tensorboardX's EventFileWriter, less its queue and thread."""

    def __init__(self, logdir: str, filename_suffix: str = ""):
        directory_check(logdir)
        self._logdir = logdir
        self._events = EventsWriter(os.path.join(logdir, "events"), filename_suffix)
        self._closed = False

    def get_logdir(self) -> str:
        return self._logdir

    def add_event(self, event: Any) -> None:
        if not self._closed:
            self._events.write_event(event)

    def flush(self) -> None:
        if not self._closed:
            self._events.flush()

    def close(self) -> None:
        if not self._closed:
            self._events.close()
            self._closed = True


class InPlaceFileWriter(FileWriter):
    def __init__(self, logdir: str, filename_suffix: str = ""):  # not super().__init__: it starts the thread
        self.event_writer = InPlaceEvents(str(logdir), filename_suffix)
        self._default_metadata: dict[str, Any] = {}


class ThrottledWriter(SummaryWriter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # (from its creation: a trial of a fraction of a second flushes once, when it closes;
        # each flush is an fsync, about 0.4 ms here)
        self.flushed_at = time.monotonic()
        super().__init__(*args, **kwargs)

    def _get_file_writer(self) -> Any:
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = InPlaceFileWriter(self.logdir, self._filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
        return self.file_writer

    def flush(self) -> None:  # close() still writes everything
        if time.monotonic() - self.flushed_at >= FLUSH_S:
            super().flush()
            self.flushed_at = time.monotonic()


STEPS = ("training_iteration", "timesteps_total")  # Ray's logger takes a scalar's step from these


class TensorBoardEvents(LoggedLater, TBXLoggerCallback):
    """Ray's TensorBoard logger (scalars per epoch, HParams at a trial's end), writing its
    event files itself (no thread of tensorboardX's) and flushing them at most every ``FLUSH_S`` while
    a trial runs and when it ends. Given to Tune, it takes the place of Tune's default one.

    tensorboardX hands every event to a thread of its own through a *multiprocessing*
    queue (pickled, through a pipe; a queue, a pipe and a thread per trial), and Ray
    flushes after every result (an fsync, about 2 ms): at 1,000 trials that was a third
    of the driver's CPU, in the loop every trial's report waits on. Serialising an event
    into the file's buffer in place takes microseconds. Written off the loop (``LoggedLater``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._summary_writer_cls = ThrottledWriter  # Ray's sets tensorboardX's own in __init__
        self._hparams_in_file: set[Any] = set()  # trials whose open event file has their HParams

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled by a resume, perhaps as an earlier tuner pickled it (without the set)."""
        self.__dict__.update({"_hparams_in_file": set(), **state})

    def log_trial_start(self, trial: Any) -> None:
        super().log_trial_start(trial)  # a new event file, on every (re)start of the trial
        self._hparams_in_file.discard(trial)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        # The trial's metrics (what MLflow logs too) and whatever else a user's code reported;
        # not Tune's and tuner's bookkeeping (the clock's entered_at, done, should_checkpoint,
        # ...): 6 of the 16 scalars of tuner's own trials, and 40% of the events' cost.
        if trial not in self._trial_writer:
            self.log_trial_start(trial)
        for epoch in records.epochs_in(result):
            shown = {key: value for key, value in epoch.items() if key not in NOT_METRICS and key != "config"}
            scalars = _scalars(flatten_dict(shown, delimiter="/"))
            if scalars is None:  # a list or an array: Ray's logger makes a histogram, an image, a video of it
                super().log_trial_result(iteration, trial, {**shown, **{k: epoch[k] for k in STEPS if k in epoch}})
                continue
            # One event an epoch with all its scalars (Ray's logger writes one a scalar, each
            # through numpy and a checksum in Python: 0.12 ms an epoch against 0.04).
            step = epoch.get("timesteps_total") or epoch["training_iteration"]
            values = [Summary.Value(tag=_clean_tag(tag), simple_value=float(value)) for tag, value in scalars.items()]
            self._trial_writer[trial].file_writer.add_summary(Summary(value=values), step)
            self._trial_result[trial] = scalars
        self._trial_writer[trial].flush()
        if trial not in self._hparams_in_file:
            self._log_hparams_begun(trial)

    def _log_hparams_begun(self, trial: Any) -> None:
        """The trial's HParams (its values, the metrics it reports) at its first report in
        each event file, the session left open: Ray writes them only when a trial ends, so
        a trial interrupted (or still running) had none in TensorBoard. Ray's own at the end
        add the session's status; the HParams plugin keeps the first of a tag's summaries."""
        from tensorboardX.summary import hparams

        metrics = {
            name: value
            for name, value in flatten_dict(self._trial_result.get(trial) or {}, delimiter="/").items()
            if isinstance(value, tuple(VALID_SUMMARY_TYPES))
        }
        values = _hparam_values(trial.evaluated_params or {})
        if not (values and metrics):
            return
        experiment, session_start, _ = hparams(hparam_dict=values, metric_dict=metrics)
        self._trial_writer[trial].file_writer.add_summary(experiment)
        self._trial_writer[trial].file_writer.add_summary(session_start)
        self._hparams_in_file.add(trial)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        super().log_trial_end(trial, failed)
        self._hparams_in_file.discard(trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Every event file still open (an interrupted sweep's trials) closed: on disk whole."""
        TRIAL_FILES.do(self._close_all)
        TRIAL_FILES.wait(raising=False)

    def _close_all(self) -> None:
        for trial in list(self._trial_writer):
            self._trial_writer.pop(trial).close()
            self._trial_result.pop(trial, None)
        self._hparams_in_file.clear()


def _scalars(flat: dict[str, Any]) -> dict[str, Any] | None:
    """An epoch's values as Ray's logger tags its scalars (``ray/tune/<key>``; NaN and text
    left out, as there); None where one is a list or an array, which only Ray's logger takes."""
    scalars = {}
    for key, value in flat.items():
        if isinstance(value, tuple(VALID_SUMMARY_TYPES)):
            if not math.isnan(value):
                scalars[f"ray/tune/{key}"] = value
        elif isinstance(value, (list, np.ndarray)) and len(value) > 0:
            return None
    return scalars


def _hparam_values(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's values as TensorBoard's HParams take them (as Ray's logger scrubs them)."""
    values = {}
    for name, value in flatten_dict(params).items():
        if isinstance(value, TBXLoggerCallback.VALID_NP_HPARAMS):
            values[name] = value.tolist()
        elif isinstance(value, TBXLoggerCallback.VALID_HPARAMS):
            values[name] = value
    return values
