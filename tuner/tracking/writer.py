"""A sweep's MLflow writes, on a thread of the driver or in a process of their own.

The driver's Tune loop handles every trial's report (a trial waits for it), and MLflow's
writes are SQLAlchemy's Python: on a thread of the driver they hold the GIL that loop
needs (a third of the driver's samples at 300 short trials, profiled). A sweep of many
trials (``PROCESS_FROM``) runs them in a child process, ``python -m tuner.tracking.writer``,
started before Ray so that its imports overlap Ray's start; a sweep of few trials, where
that start would cost more than it saves, on a thread (``WriterThread``). The same loop
(``serve``) and the same rules (``MlflowWriter``) run in both. In the process, fed in event
order through a socket:

- the driver sends each event (a trial started, reported, ended; the sweep ended) as one
  pickled message and never waits for a write; the child's reader keeps up to ``QUEUED``
  of them, and past that the socket's buffer fills and the driver waits (a bounded queue);
- the child owns the sweep's MLflow record (tuner/tracking/mlflow_runs.py): it opens the
  store, flushes the epochs due every ``FLUSH_S`` on its own clock, keeps the writes
  while a tracking server is away and asks again every ``PROBE_S``;
- what it has to tell the driver comes back on the same socket: lines to show, and a
  write that failed, which the driver raises at its next event (a full disk among them,
  noted for the driver's one line);
- it ignores SIGINT and SIGTERM (the driver decides when a sweep stops, and then sends
  the end), and when its socket closes without an end (the driver was killed) it writes
  what it holds and exits: nothing outlives the driver, and what it could not write is
  in the history, which a resume writes.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import os
import pickle
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tuner.ahead import import_ahead
from tuner.console import SAYING, say
from tuner.errors import TunerError
from tuner.folder import records, store
from tuner.folder.store import SweepFolder
from tuner.tracking.mlflow_outage import answers, fail_fast_over_http, unreachable
from tuner.tracking.mlflow_runs import FLUSH_S

QUEUED = 100_000  # events the writer holds before the driver waits for it
CLOSE, LOST = "close", "lost"  # the driver's end; the driver gone without one
ASK = "ask"  # one of the sweep's last writes, which the driver waits for (MlflowWriter.ask)


class MlflowWriter:
    """The writer's side (in the child process): the sweep's record, written in event order,
    and a tracking server that goes away.

    The history holds every epoch whatever MLflow does, so the sweep never waits for it: a
    write that finds the server away is kept, in order, with every one after it; the
    writer asks again every ``PROBE_S``, then writes what was kept and fills the gaps from
    the history (a flush cut short drops its epochs: backfill). Each is said once."""

    PROBE_S = 5.0  # while the tracking server is away: how often the writer asks again

    def __init__(self, sweep: Any, folder: SweepFolder) -> None:
        self.sweep, self.folder = sweep, folder
        self.record: Any = None
        self.missed: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []  # held while MLflow is away
        self.away_since: float | None = None
        self.next_probe = self.next_flush = 0.0

    def _uri(self) -> str:
        from tuner.tracking.mlflow_runs import sweep_uri

        return self.record.uri if self.record else sweep_uri(self.sweep, self.folder)

    # --- the events, by name (what the driver's callback sends) -----------------------------
    def open(self) -> None:
        from tuner.tracking.mlflow_runs import SweepRecord

        self.record = SweepRecord(self.sweep, self.folder)
        self.record.backfill(records.trial_histories(self.folder))
        records.mlflow_caught_up(self.folder)  # what an earlier run could not write is written now

    def trial_start(self, trial_id: str, config: dict[str, Any]) -> None:
        self.record.trial_run(trial_id, config)

    def result(self, trial_id: str, config: dict[str, Any], *results: dict[str, Any]) -> None:
        """One Tune result's epochs (several where the trial held some back): one event."""
        for result in results:  # (tried again whole after an outage: an epoch queued already is skipped)
            self.record.log_result(trial_id, config, result)

    def end(self, trial_id: str, config: dict[str, Any], status: str) -> None:
        self.record.end_trial(trial_id, config, status)

    def stalled(self, trial_id: str, config: dict[str, Any], reason: str) -> None:
        self.record.client.set_tag(self.record.trial_run(trial_id, config), "tuner.stalled", reason)

    def retrying(self, trial_id: str, config: dict[str, Any]) -> None:
        self.record.flush()
        self.record.client.set_tag(self.record.trial_run(trial_id, config), "tuner.status", "retrying")

    def experiment_end(self, ended: list[tuple[str, dict[str, Any], str | None]]) -> None:
        """Every ended trial's run ended with its status, then everything flushed. Those this
        driver did not end are a resumed sweep's: trials that ended while MLflow was away in an
        earlier run of it (no run yet: made now, with the epochs the history has), and trials
        whose end an earlier driver, killed, had not written while Tune had saved it (their
        runs still RUNNING, without their values and status)."""
        for trial_id, config, status in ended:
            if status is not None and self.record.ended.get(trial_id) != status:
                self.record.end_trial(trial_id, config, status)
        self.record.flush(save=True)

    def last_call(self) -> None:
        """The sweep ended: one last try if the server was away (still away, the folder's
        mlflow.behind stays, and the driver says after the export how its records get written)."""
        if self.missed:
            self.probe()

    def ready_model_logging(self) -> None:
        """What logging the best model at the sweep's end needs, made ahead while trials run
        (sent at the first trial's end, when Ray's start and the first trials' no longer
        need the CPU): MLflow's scan of the installed packages, and torch on a thread at
        the default priority (the socket's reader shares the GIL with it). MLflow loads the
        logged model to check its input example; in the driver, a thread writer's process,
        torch is imported already."""
        from tuner.tracking import mlflow_model

        mlflow_model.scan_installed_packages()
        import_ahead("torch", name="tuner-mlflow-torch")

    EVENTS = ("open", "trial_start", "result", "end", "stalled", "retrying", "experiment_end", "ready_model_logging")
    ASKED = ("finish", "fail", "nothing_feasible")  # the sweep record's last writes, after Tune's end

    def ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        """One of the sweep record's last writes, answered: (True, what it returned), or
        (False, None) where MLflow is away (noted in the folder, for the driver's one line)."""
        if method not in self.ASKED:
            raise TunerError(f"the MLflow writer was asked for a write it does not make: {method!r}")
        self.last_call()
        if self.missed or self.record is None:
            return False, None
        try:
            return True, getattr(self.record, method)(*args)
        except Exception as error:
            if (why := unreachable(error)) is None:
                raise
            records.note_mlflow_behind(self.folder, f"MLflow was unreachable at the sweep's end ({why})")
            return False, None

    def handle(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in self.EVENTS:
            raise TunerError(f"the MLflow writer got an event it does not know: {event!r}")
        self.guarded(getattr(self, event), *args)

    # --- a tracking server that goes away -----------------------------------------------------
    def guarded(self, write: Callable[..., Any], *args: Any) -> None:
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
        records.note_mlflow_behind(self.folder, f"MLflow at {self._uri()} was unreachable ({why})")
        say(
            f"MLflow at {self._uri()} is unreachable ({why}); the sweep goes on, its records kept in the history "
            "until MLflow is back"
        )

    def probe(self) -> bool:
        """Whether MLflow answers again; if so, write what it missed."""
        if not self.missed:
            return True
        try:
            if not answers(self._uri()):
                return False
            if self.record is not None:  # first the epochs a flush cut short dropped, in order
                self.record.backfill(records.trial_histories(self.folder))
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
        records.mlflow_caught_up(self.folder)
        say(f"MLflow at {self._uri()} is back after {away:.0f} s; what it missed is written")
        self.away_since = None
        return True

    # --- the writer's own clock -----------------------------------------------------------------
    def tick(self) -> None:
        """Between events: ask a server that was away again every ``PROBE_S``; else write the
        epochs queued ``FLUSH_S`` ago or more, though no result has come since to write them
        with (a slow epoch's, or those of trials that all wait)."""
        now = time.monotonic()
        if self.missed:
            if now >= self.next_probe:
                self.next_probe = now + self.PROBE_S
                self.probe()
        elif now >= self.next_flush:
            self.next_flush = now + FLUSH_S
            record = self.record
            if record is not None and record.pending and now - record.flushed_at >= FLUSH_S:
                self.guarded(record.flush)

    def wait_s(self) -> float:
        """How long the next event may be waited for before ``tick`` is due."""
        due = self.next_probe if self.missed else self.next_flush
        return min(max(due - time.monotonic(), 0.05), FLUSH_S)

    def flush_what_is_held(self) -> None:
        """The driver is gone (killed): write what this writer holds, for the resume to build on."""
        if self.record is not None and not self.missed:
            with contextlib.suppress(Exception):
                self.record.flush(save=True)


# --- the child process ------------------------------------------------------------------------


def serve(sweep: Any, folder: SweepFolder, inbox: queue.Queue, tell: Callable[..., None]) -> None:
    """The writer's loop (in the process, or on a thread): events in order from ``inbox``,
    its own clock between them, lines and failures out through ``tell``."""
    writer = MlflowWriter(sweep, folder)
    SAYING.set(lambda line: tell("say", line))
    with store.writing_records_to(folder):
        while True:
            try:
                event, args = inbox.get(timeout=writer.wait_s())
            except queue.Empty:
                event, args = "", ()
            try:
                if event == LOST:
                    writer.flush_what_is_held()
                    return
                if event == CLOSE:
                    writer.last_call()
                    tell("closed")
                    return
                if event == ASK:
                    tell("answer", writer.ask(*args))
                    continue
                if event:
                    writer.handle(event, args)
                writer.tick()
            except Exception as error:  # raised in the driver at its next event
                tell("error", _sendable(error))


def main(fd: int) -> None:
    for stop in (signal.SIGINT, signal.SIGTERM):  # the driver stops the sweep, then sends the end
        signal.signal(stop, signal.SIG_IGN)
    connection = Connection(fd)
    sending = threading.Lock()

    def tell(kind: str, payload: Any = None) -> None:
        with sending, contextlib.suppress(OSError):
            connection.send((kind, payload))

    # MLflow's client and store imported while the driver starts Ray, at the lowest priority
    # (the CPU Ray's start leaves idle), on a thread that ends (this one keeps its priority),
    # before this process has any other thread.
    modules = ("mlflow.store.tracking.sqlalchemy_store", "mlflow.tracking")
    import_ahead(*modules, name="tuner-mlflow-imports", lowly=True).join()
    try:
        sweep, folder, environment = connection.recv()
    except (EOFError, OSError):  # started ahead for a sweep that never began
        return
    os.environ.update(environment)  # the driver's MLflow settings as they are now, not at this start
    inbox: queue.Queue = queue.Queue(maxsize=QUEUED)

    def read() -> None:  # the socket's messages into the inbox, so that the driver's sends seldom wait
        while True:
            try:
                inbox.put(connection.recv())
            except (EOFError, OSError):
                inbox.put((LOST, ()))
                return

    threading.Thread(target=read, name="tuner-mlflow-reader", daemon=True).start()
    serve(sweep, folder, inbox, tell)
    os._exit(0)  # every write is committed and told: no interpreter teardown for the driver to wait on


def _sendable(error: BaseException) -> BaseException:
    """``error`` if it pickles and comes back whole, else a TunerError with its text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return TunerError(f"{type(error).__name__}: {error}")


# --- the driver's side ------------------------------------------------------------------------


class _Writer:
    """What the driver does with the writer's messages, whichever way they come."""

    folder: SweepFolder | None = None
    closed = gone = False
    cpu_s: float | None = None
    answer: tuple[bool, Any] | None = None

    def ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        """One of the sweep record's last writes (``MlflowWriter.ASKED``), made by the writer,
        whose store is open and MLflow imported, once it has written every event before it;
        waits for its answer. A write that failed is raised."""
        raise NotImplementedError

    def _handle(self, message: tuple[str, Any]) -> None:
        kind, payload = message
        if kind == "say":
            say(payload)
        elif kind == "closed":
            self.closed = True
        elif kind == "answer":
            self.answer = tuple(payload)  # type: ignore[assignment]
        elif kind == "error":
            if isinstance(payload, store.StorageError):
                store.note_failed_write(payload)
            raise payload


class WriterThread(_Writer):
    """The writer on a thread of the driver, for a sweep of few trials: a process of its own
    costs its start (about 2 s of CPU, 4-5 s of a 2-trial sweep's wall on a loaded 2-core
    machine) and pays back only over many trials (benchmarks/README.md)."""

    def begin(self, sweep: Any, folder: SweepFolder) -> None:
        self.folder = folder
        self.inbox: queue.Queue = queue.Queue(maxsize=QUEUED)
        self.outbox: collections.deque = collections.deque()
        tell = lambda kind, payload=None: self.outbox.append((kind, payload))  # noqa: E731
        context = contextvars.copy_context()  # the folder being written, the refused writes
        self.thread = threading.Thread(
            target=context.run, args=(serve, sweep, folder, self.inbox, tell), name="tuner-mlflow", daemon=True
        )
        self.thread.start()
        self.send("open")

    def send(self, event: str, *args: Any) -> None:
        self.check()
        self.inbox.put((event, args))

    def check(self) -> None:
        while self.outbox:
            self._handle(self.outbox.popleft())

    def ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        self.answer = None
        self.inbox.put((ASK, (method, *args)))
        while self.answer is None:
            self.check()
            if self.answer is None and not self.thread.is_alive():
                self.check()
                return self.answer or (False, None)
            time.sleep(0.005)
        return self.answer

    def close(self) -> None:
        self.inbox.put((CLOSE, ()))
        self.thread.join()
        failed: BaseException | None = None
        while self.outbox:
            try:
                self._handle(self.outbox.popleft())
            except Exception as error:
                failed = failed or error
        if failed is not None:
            raise failed


class WriterProcess(_Writer):
    """The driver's handle on its MLflow writer: events out, lines and failures back.

    A writer that dies (killed, out of memory) does not stop the sweep: like a tracking
    server that went away, the folder notes MLflow as behind, the sweep goes on with its
    history, and a resume writes what MLflow lacks."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])  # tuner importable however the driver found it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
        # Ignoring SIGINT and SIGTERM from its first instruction (an ignored signal stays
        # ignored across exec, and Python keeps it so): a Ctrl-C while it imports must not
        # kill it. It stays in the driver's process group, so a SIGKILL to the group ends it.
        # Until the shell has run its trap, the two are blocked: a child starts with the
        # blocked set of the thread that forked it, and a blocked signal waits, to be dropped
        # once ignored. Without that, a stop sent in the shell's first milliseconds killed it.
        command = f"trap '' INT TERM; exec {shlex.quote(sys.executable)} -m tuner.tracking.writer {theirs.fileno()}"
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", command],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # the driver's own, as before
        theirs.close()
        self.connection = Connection(mine.detach())

    def begin(self, sweep: Any, folder: SweepFolder) -> None:
        """The sweep to write for; the writer opens its record."""
        self.folder = folder
        environment = {name: value for name, value in os.environ.items() if name.startswith("MLFLOW_")}
        self._send((sweep, folder, environment))
        self.send("open")

    def send(self, event: str, *args: Any) -> None:
        self.check()
        self._send((event, args))

    def _send(self, message: Any) -> None:
        if self.gone:
            return
        try:
            self.connection.send(message)
        except OSError:
            self._went()

    def ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        """(False, None) too when the writer is gone (noted in the folder as MLflow behind)."""
        self.answer = None
        self._send((ASK, (method, *args)))
        while self.answer is None and not (self.closed or self.gone):
            if self._poll(0.2):
                self._take()
            elif self.process.poll() is not None and not self._poll(0):
                self._went()
        return self.answer or (False, None)

    def check(self) -> None:
        """Show the writer's lines; raise the first write it says failed."""
        while not (self.closed or self.gone) and self._poll(0):
            self._take()

    def _poll(self, timeout: float) -> bool:
        try:
            return self.connection.poll(timeout)
        except (EOFError, OSError):
            self._went()
            return False

    def _take(self) -> None:
        try:
            message = self.connection.recv()
        except (EOFError, OSError):
            self._went()
            return
        self._handle(message)

    def _went(self) -> None:
        """The writer is gone without being told to go: said once, noted for the resume."""
        if self.gone or self.closed:
            return
        self.gone = True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        why = f"MLflow's writer process exited (code {self.process.poll()})"
        if self.folder is not None:
            records.note_mlflow_behind(self.folder, why)
        say(f"{why}; the sweep goes on, its records kept in the history")

    def close(self) -> None:
        """Send the end and wait until everything is written (or the writer is gone); then
        raise the first write that failed, if one did."""
        failed: BaseException | None = None
        try:
            self._send((CLOSE, ()))
            while not (self.closed or self.gone):
                if self._poll(0.2):
                    try:
                        self._take()
                    except Exception as error:
                        failed = failed or error
                elif self.process.poll() is not None and not self._poll(0):
                    self._went()
        finally:
            self.connection.close()
            self._reap()
        if failed is not None:
            raise failed

    def _reap(self, timeout_s: float = 10.0) -> None:
        """Wait for the writer to exit, keeping the CPU it used (``cpu_s``: benchmarks/)."""
        deadline = time.monotonic() + timeout_s
        while self.process.returncode is None and time.monotonic() < deadline:
            try:
                pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                return
            if pid == 0:
                time.sleep(0.02)
                continue
            self.process.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_s = usage.ru_utime + usage.ru_stime


PROCESS_FROM = 100  # trials: a sweep of this many or more writes from a process of its own
# ... unless a time budget ends it sooner than this: the process's start (about 2 s of CPU
# while the first trials start) is paid back over minutes of results, not seconds
PROCESS_MIN_BUDGET_S = 120.0
_AHEAD: list[WriterProcess] = []  # started before Ray, for the sweep's callback to take
_HELD: list[list[_Writer]] = []  # by sweep driver running (``held_open``): the writers Tune's end left open


@contextlib.contextmanager
def held_open() -> Any:
    """While a sweep's driver runs this, its writer stays open past Tune's end (``hold``), so
    that the sweep's last writes (the best model logged and registered) are made where the
    store is open and MLflow imported (``take_held``, then ``ask``), not opened again in the
    driver (2 s of imports for a writer process's sweep, profiled); closed here at the latest."""
    held: list[_Writer] = []
    _HELD.append(held)
    try:
        yield
    finally:
        _HELD.remove(held)
        while held:
            held.pop().close()


def hold(writer: _Writer) -> bool:
    """Keep ``writer`` open for the sweep's driver, if one is running ``held_open``."""
    if not _HELD:
        return False
    _HELD[-1].append(writer)
    return True


def take_held() -> _Writer | None:
    """The sweep's writer Tune's end left open, for the caller to ask and then close."""
    return _HELD[-1].pop() if _HELD and _HELD[-1] else None


def in_process(sweep: Any) -> bool:
    """Whether the sweep's writes go to a process of their own (else a thread of the
    driver). At 300 short trials the process took the driver's CPU from 81 s to 52-57 s
    and the wall 5-8% down; at 2 trials its start added 4-5 s to the command on a loaded
    2-core machine (benchmarks/README.md). ``num_samples: -1`` (until a time budget ends)
    counts as many, unless ``trials.time_budget_s`` ends the sweep within ``PROCESS_MIN_BUDGET_S``."""
    total = sweep.total_trials
    budget = sweep.trials.time_budget_s
    if budget is not None and budget < PROCESS_MIN_BUDGET_S:
        return False
    return total < 0 or total >= PROCESS_FROM


def start_ahead(sweep: Any) -> None:
    """For a sweep that writes from a process: start it now, before Ray starts, so that its
    imports (MLflow, SQLAlchemy, tuner's config: about 2 s of CPU) run while ``ray.init``
    mostly waits. ``start`` takes it; ``drop_ahead`` ends one no sweep took."""
    if in_process(sweep) and not _AHEAD:
        _AHEAD.append(WriterProcess())


def drop_ahead() -> None:
    """End a writer started ahead that no sweep took, without waiting for it: it sees its
    socket close before any sweep and exits (once its imports are done)."""
    while _AHEAD:
        _AHEAD.pop().connection.close()


def start(sweep: Any, folder: SweepFolder, uri: str) -> WriterThread | WriterProcess:
    """The writer for this sweep: a thread, or a process (the one started ahead, else a new one)."""
    fail_fast_over_http(uri)  # (MLflow's settings go to a writer process with the sweep)
    writer: WriterThread | WriterProcess
    if not in_process(sweep):
        writer = WriterThread()
    else:
        writer = _AHEAD.pop() if _AHEAD else WriterProcess()
    writer.begin(sweep, folder)
    return writer


if __name__ == "__main__":
    main(int(sys.argv[1]))
