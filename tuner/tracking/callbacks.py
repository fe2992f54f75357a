"""The Tune callbacks that record a sweep outside its folder: MLflow (one writer thread,
in event order) and TensorBoard (event files written in place).

Tune pickles its callbacks with the experiment, and a resumed sweep gets them back from
that pickle: each holds only the config and folder, and opens what it writes to when
Tune sets it up.
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ray.tune import Callback
from ray.tune.logger import TBXLoggerCallback
from ray.tune.logger.tensorboardx import VALID_SUMMARY_TYPES
from tensorboardX import SummaryWriter
from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.record_writer import directory_check
from tensorboardX.writer import FileWriter

from tuner.console import say
from tuner.folder import records, store
from tuner.folder.store import SweepFolder
from tuner.search.define_by_run import RETURNED
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import mlflow_model
from tuner.tracking.mlflow_outage import answers, fail_fast_over_http, unreachable
from tuner.tracking.mlflow_runs import FLUSH_S, SweepRecord, tracking_uri


class MlflowTrials(Callback):
    """A Tune callback that mirrors trial events into the sweep's MLflow record.

    Every MLflow write happens on one writer thread, in the order of the events, so that
    Tune's loop (which every trial waits on: a trial's report returns only once the driver
    has handled it) never waits for sqlite: at 1,000 trials the writes took 49 s of the
    driver's time. The store is opened there too, while Tune starts the first trials. A
    write that failed is raised at the next event, and at the sweep's end, which waits for
    every write.

    It holds only the config and folder (it is pickled with the experiment, for
    resume) and opens the record in ``setup``, which Tune calls on every (re)start.
    """

    PROBE_S = 5.0  # while the tracking server is away: how often the writer asks again

    def __init__(self, sweep: SweepConfig, folder: SweepFolder) -> None:
        self.sweep, self.folder = sweep, folder
        self.record: SweepRecord | None = None
        self.writer: ThreadPoolExecutor | None = None
        self.writes: list[Future] = []
        self.missed: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []  # held while MLflow is away
        self.away_since: float | None = None
        self.next_probe = self.next_flush = 0.0

    def setup(self, **info: Any) -> None:
        fail_fast_over_http(self._uri())
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tuner-mlflow")
        self._then(self._open)

    def _uri(self) -> str:
        return (
            self.record.uri
            if self.record
            else records.read_mlflow_state(self._folder()).get("tracking_uri") or tracking_uri(self.sweep)
        )

    def _folder(self) -> SweepFolder:
        return store.current(self.folder)

    def _open(self) -> None:
        self.record = SweepRecord(self.sweep, self._folder())
        self.record.backfill(records.trial_histories(self._folder()))
        records.mlflow_caught_up(self._folder())  # what an earlier run could not write is written now
        mlflow_model.scan_installed_packages()  # while the first trials start, not at the export

    def _then(self, write: Callable[..., Any], *args: Any) -> None:
        """Queue a write after the others; first raise any that failed."""
        self._raise_failed(wait=False)
        # In a copy of this context: the folder being written now, the refused writes.
        self.writes.append(self.writer.submit(contextvars.copy_context().run, self._guarded, write, *args))

    # --- a tracking server that goes away -----------------------------------------------------
    # The history holds every epoch whatever MLflow does, so the sweep never waits for it: a
    # write that finds the server away is kept, in order, with every one after it; the
    # writer asks again every PROBE_S, then writes what was kept and fills the gaps from the
    # history (a flush cut short drops its epochs: backfill). Each is said once.
    def _guarded(self, write: Callable[..., Any], *args: Any) -> None:
        if self.missed:  # away: keep the order
            self.missed.append((write, args))
            return
        tried_at = time.monotonic()
        try:
            write(*args)
        except Exception as error:
            if (why := unreachable(error)) is None:
                raise
            self.missed.append((write, args))
            self._went_away(why, tried_at)

    def _went_away(self, why: str, since: float) -> None:
        self.away_since = since  # away from the failed write's start: a hung server took 35 s to fail it
        self.next_probe = time.monotonic() + self.PROBE_S
        records.note_mlflow_behind(self._folder(), f"MLflow at {self._uri()} was unreachable ({why})")
        say(
            f"MLflow at {self._uri()} is unreachable ({why}); the sweep goes on, its records kept in the history "
            "until MLflow is back"
        )

    def _probe(self) -> bool:
        """(Writer thread.) Whether MLflow answers again; if so, write what it missed."""
        if not self.missed:
            return True
        try:
            if not answers(self._uri()):
                return False
            if self.record is not None:  # first the epochs a flush cut short dropped, in order
                self.record.backfill(records.trial_histories(self._folder()))
            missed, self.missed = self.missed, []
            for done, (write, args) in enumerate(missed):  # then the rest (a repeated epoch is skipped)
                try:
                    write(*args)
                except Exception as error:
                    if unreachable(error) is None:
                        raise
                    self.missed = missed[done:]
                    return False
        except Exception as error:
            if unreachable(error) is None:
                raise
            return False
        away = time.monotonic() - (self.away_since or time.monotonic())
        records.mlflow_caught_up(self._folder())
        say(f"MLflow at {self._uri()} is back after {away:.0f} s; what it missed is written")
        self.away_since = None
        return True

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if self.missed:  # (read across threads: a late probe is harmless)
            if now >= self.next_probe:
                self.next_probe = now + self.PROBE_S
                self.writes.append(self.writer.submit(contextvars.copy_context().run, self._probe))
        elif now >= self.next_flush:
            self.next_flush = now + FLUSH_S
            self._then(self._flush_due)

    def _flush_due(self) -> None:
        """Epochs queued ``FLUSH_S`` ago or more, written though no result has come since to
        write them with: a slow epoch's, or those of trials that all wait (a server that went
        away meanwhile is noticed then too, not at the next result)."""
        if self.record is not None and self.record.pending and time.monotonic() - self.record.flushed_at >= FLUSH_S:
            self.record.flush()

    def _raise_failed(self, wait: bool) -> None:
        done = [w for w in self.writes if wait or w.done()]
        self.writes = [w for w in self.writes if w not in done]
        for write in done:
            write.result()

    def on_trial_start(self, iteration, trials, trial, **info):
        self._then(lambda *args: self.record.trial_run(*args), trial.trial_id, dict(trial.config))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # A copy, taken here: Tune goes on adding to the result while the writer thread logs it
        # ("dictionary changed size during iteration", seen in benchmarks/search_quality.py).
        self._then(lambda *args: self.record.log_result(*args), trial.trial_id, dict(trial.config), dict(result))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, _status(trial, self.sweep.max_epochs, ended=True))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._tag_stall(trial)
        self._end(trial, "errored")

    def _tag_stall(self, trial: Any) -> None:
        """A trial the stall watchdog stopped (tuner/driver/stalls.py): its run says so and why."""
        reason = records.stall_reasons(records.read_timeline(store.current(self.folder))).get(trial.trial_id)
        if reason:
            tag = lambda trial_id, config: self.record.client.set_tag(
                self.record.trial_run(trial_id, config), "tuner.stalled", reason
            )
            self._then(tag, trial.trial_id, dict(trial.config))

    def _end(self, trial: Any, status: str) -> None:
        self._then(lambda *args: self.record.end_trial(*args), trial.trial_id, dict(trial.config), status)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._tag_stall(trial)
        self._then(self._retrying, trial.trial_id, dict(trial.config))

    def _retrying(self, trial_id: str, config: dict[str, Any]) -> None:
        self.record.flush()
        self.record.client.set_tag(self.record.trial_run(trial_id, config), "tuner.status", "retrying")

    def on_experiment_end(self, trials, **info):  # finished, failed or interrupted
        # Trials that ended while MLflow was away, in an earlier run of this sweep, have no run
        # yet: made now, with the epochs the history has for them.
        ended = [(t.trial_id, dict(t.config), _status(t, self.sweep.max_epochs)) for t in trials]
        self._then(self._every_trial_recorded, ended)
        self._then(lambda: self.record.flush(save=True))
        try:
            self._raise_failed(wait=True)
            if self.missed:  # one last time; still away, the folder's mlflow.behind stays, and the
                # driver says after the export how its records get written (tuner.driver.sweep)
                self.writer.submit(contextvars.copy_context().run, self._probe).result()
        finally:
            self.writer.shutdown(wait=True)

    def _every_trial_recorded(self, ended: list[tuple[str, dict[str, Any], str | None]]) -> None:
        for trial_id, config, status in ended:
            if status is not None and trial_id not in self.record.trials:
                self.record.trial_run(trial_id, config)
                self.record.end_trial(trial_id, config, status)

    def __getstate__(self) -> dict[str, Any]:  # the rest is made anew, and reopened in setup()
        return {"sweep": self.sweep, "folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Only these two: a sweep that an earlier tuner pickled lacks the fields added since
        # (the writes kept while the server was away, the next probe, the next flush).
        self.__init__(state["sweep"], state["folder"] if "folder" in state else state["paths"])  # before issue 40


def _status(trial: Any, max_epochs: int, ended: bool = False) -> str | None:
    """How an ended trial ended, as its run's ``tuner.status`` says; None: it has not.
    ``ended``: Tune says it completed (its status may not say TERMINATED yet)."""
    if trial.status == "ERROR":
        return "errored"
    if trial.status != "TERMINATED" and not ended:
        return None
    last = trial.last_result or {}
    return "finished" if int(last.get("training_iteration", 0)) >= max_epochs or last.get(RETURNED) else "stopped_early"


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
    flushed_at = 0.0

    def _get_file_writer(self) -> Any:
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = InPlaceFileWriter(self.logdir, self._filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
        return self.file_writer

    def flush(self) -> None:  # close() still writes everything
        if time.monotonic() - self.flushed_at >= FLUSH_S:
            super().flush()
            self.flushed_at = time.monotonic()


class TensorBoardEvents(TBXLoggerCallback):
    """Ray's TensorBoard logger (scalars per epoch, HParams at a trial's end), writing its
    event files in the driver's own thread and flushing them at most every ``FLUSH_S`` while
    a trial runs and when it ends. Given to Tune, it takes the place of Tune's default one.

    tensorboardX hands every event to a thread of its own through a *multiprocessing*
    queue (pickled, through a pipe; a queue, a pipe and a thread per trial), and Ray
    flushes after every result (an fsync, about 2 ms): at 1,000 trials that was a third
    of the driver's CPU, in the loop every trial's report waits on. Serialising an event
    into the file's buffer in place takes microseconds.
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
        super().log_trial_result(iteration, trial, result)
        if trial not in self._hparams_in_file:
            self._log_hparams_begun(trial)

    def _log_hparams_begun(self, trial: Any) -> None:
        """The trial's HParams (its values, the metrics it reports) at its first report in
        each event file, the session left open: Ray writes them only when a trial ends, so
        a trial interrupted (or still running) had none in TensorBoard. Ray's own at the end
        add the session's status; the HParams plugin keeps the first of a tag's summaries."""
        from ray.tune.utils import flatten_dict
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
        for trial in list(self._trial_writer):
            self._trial_writer.pop(trial).close()
            self._trial_result.pop(trial, None)
        self._hparams_in_file.clear()


def _hparam_values(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's values as TensorBoard's HParams take them (as Ray's logger scrubs them)."""
    from ray.tune.utils import flatten_dict

    values = {}
    for name, value in flatten_dict(params).items():
        if isinstance(value, TBXLoggerCallback.VALID_NP_HPARAMS):
            values[name] = value.tolist()
        elif isinstance(value, TBXLoggerCallback.VALID_HPARAMS):
            values[name] = value
    return values
