"""What a sweep shows while it runs, in place of Ray's own tables.

On a terminal, one compact view that ``rich`` redraws in place: trials finished /
running / stopped early / errored out of the total, each running trial's epoch and
latest metric, the best so far with its hyperparameters, the time spent and an
estimate of what is left. Anywhere else (CI, a log file, a Ray Job) one plain line per
event: a trial started, an epoch, a trial stopped early, finished or errored, the best
changed. Everything is read from Tune's own trial objects in a driver callback, so a
resumed sweep shows its restored trials too.

A reader that goes away (``tuner sweep ... | head``) never stops a sweep: its records are
the point. The output just goes quiet, and the sweep runs to its end.
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TextIO

from tuner.console import SAYING
from tuner.folder import constraints as constraining
from tuner.results.tables import values_text
from tuner.search.define_by_run import RETURNED

ENDED = ("TERMINATED", "ERROR")


@dataclass
class _Best:
    trial_id: str
    value: float
    epoch: int
    config: dict[str, Any]


@dataclass
class Progress:
    """The sweep's state as the progress view needs it; ``lines`` receives plain events."""

    name: str
    metric: str
    mode: str
    total_trials: int
    max_epochs: int
    searched: list[str] | None = None  # the hyperparameters shown (None: all); constants say nothing
    started: float = field(default_factory=time.monotonic)
    trials: list[Any] = field(default_factory=list)
    best: _Best | None = None
    epochs_seen: int = 0  # reported in this run of the command: the pace for the estimate
    first_epoch_at: float | None = None
    # Ctrl-C: Tune marks the trials it stops TERMINATED without telling the callbacks, so a
    # trial seen unended here that ends with no word from Tune was interrupted, not stopped.
    unended: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    # the sweep's constraints (tuner/folder/constraints.py): a trial missing them is never "best"
    constraints: tuple[Any, ...] = ()
    constrained_values: dict[str, dict[str, float]] = field(default_factory=dict)  # trial -> metric -> last
    # an Optuna objective's sweep, once a trial has returned its value: judged by returned
    # values only, as status, best and the export judge it (tuner.folder.records.best_epoch)
    by_returned: bool = False
    _looked_at: int = 0  # how many of Tune's trials observe() has looked at

    # --- events, from the Tune callback ---------------------------------------------------
    def observe(self, trials: list[Any]) -> None:
        """Tune's trial list, at every event and every step of its loop. Tune only appends to
        it, and a trial is seen unended where it first appears (pending) or at its start
        (``started``): only the trials new since the last look are looked at, so a step
        does not cost more the more trials the sweep has had (it did: 4% of the driver at
        300 trials)."""
        self.trials = list(trials)
        for trial in trials[self._looked_at :]:
            if trial.status not in ENDED:
                self.unended.add(trial.trial_id)
        self._looked_at = len(trials)
        if self.best is not None and not self.best.config:  # seeded before the trials were known
            self.best.config = next((dict(t.config) for t in self.trials if t.trial_id == self.best.trial_id), {})

    def seed(self, best: Any) -> None:
        """A resumed sweep's best so far (tuner.folder.records.best_epoch over its history)."""
        self.best = _Best(best.trial_id, float(best.value), int(best.epoch), {})
        self.by_returned = bool(best.row.get(RETURNED))

    def result(self, trial: Any, result: dict[str, Any]) -> str | None:
        """An epoch; returns the line saying the best changed, if it did."""
        self.epochs_seen += 1
        self.first_epoch_at = self.first_epoch_at or time.monotonic()
        value = result.get(self.metric)
        if not isinstance(value, (int, float)) or value != value:  # absent or NaN: never "best"
            return None
        if self.constraints and not self._feasible(trial.trial_id, result):
            return None
        if result.get(RETURNED) and not self.by_returned:  # what was reported on the way was for the pruner
            self.by_returned, self.best = True, None
        elif self.by_returned and not result.get(RETURNED):
            return None
        return self._offer(trial.trial_id, float(value), int(result.get("training_iteration", 0)), trial.config)

    def _feasible(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Whether the trial meets the constraints by what it has reported so far."""
        seen = self.constrained_values.setdefault(trial_id, {})
        seen.update(constraining.last_values([result], (c.metric for c in self.constraints)))
        return all(c.holds(seen.get(c.metric)) for c in self.constraints)

    def _offer(self, trial_id: str, value: float, epoch: int, config: dict[str, Any]) -> str | None:
        better = self.best is None or (value > self.best.value if self.mode == "max" else value < self.best.value)
        if not better:
            return None
        self.best = _Best(trial_id, value, epoch, dict(config))
        return f"best so far: {trial_id} {self.metric}={value:.4f} at epoch {epoch}{self.hyper(config, ' ({})')}"

    def hyper(self, config: dict[str, Any], form: str = "{}") -> str:
        """The searched hyperparameters, ``form`` around them; "" when nothing is searched."""
        text = hyper_text(config, self.searched)
        return form.format(text) if text else ""

    # --- what is shown --------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        counts = {"finished": 0, "running": 0, "stopped early": 0, "errored": 0, "interrupted": 0, "pending": 0}
        for trial in self.trials:
            counts[self.state(trial)] += 1
        counts["pending"] += max(0, self.total_trials - len(self.trials))
        return counts

    def state(self, trial: Any) -> str:
        if trial.status == "ERROR":
            return "errored"
        if trial.status == "TERMINATED":
            if _epoch(trial) >= self.max_epochs or last_reported(trial).get(RETURNED):
                return "finished"
            if trial.trial_id in self.unended and trial.trial_id not in self.completed:
                return "interrupted" if _epoch(trial) else "pending"
            return "stopped early"
        if trial.status in ("RUNNING", "PAUSED"):
            return "running"
        return "pending"

    def seconds_left(self) -> float | None:
        """Epochs still to run at the pace of this command's epochs so far (an upper bound
        when a scheduler stops trials early). After Ctrl-C, Tune marks the trials it stopped
        TERMINATED: interrupted and pending ones still count, as a resume would run them."""
        if not self.first_epoch_at or self.epochs_seen < 2:
            return None
        pace = (time.monotonic() - self.first_epoch_at) / (self.epochs_seen - 1)
        to_run = ("running", "interrupted", "pending")
        left = sum(self.max_epochs - _epoch(t) for t in self.trials if self.state(t) in to_run)
        left += max(0, self.total_trials - len(self.trials)) * self.max_epochs
        return left * pace  # pace: wall seconds per epoch, all trials at once

    def summary_line(self) -> str:
        """e.g. ``mnist_asha 4/6 done: 3 finished, 1 stopped early | 2 running | 5m41s, at most ~2m03s left``"""
        counts = self.counts()
        ended = ("finished", "stopped early", "errored")
        done = sum(counts[state] for state in ended)
        line = f"{self.name} {done}/{self.total_trials} done"
        if done:
            line += ": " + ", ".join(f"{counts[state]} {state}" for state in ended if counts[state])
        if counts["running"]:
            line += f" | {counts['running']} running"
        if counts["interrupted"]:
            line += f" | {counts['interrupted']} interrupted"
        line += f" | {_duration(time.monotonic() - self.started)}"
        left = self.seconds_left()
        if left is not None and done < self.total_trials:
            line += f", at most ~{_duration(math.ceil(left))} left"  # an upper bound: rounded up
        return line

    def best_line(self) -> str:
        if self.best is None:
            return "best so far: none yet"
        b = self.best
        return (
            f"best so far: {b.trial_id} {self.metric}={b.value:.4f} at epoch {b.epoch}{self.hyper(b.config, ' ({})')}"
        )

    def renderable(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("trial", "epoch", self.metric, "hyperparameters"):
            table.add_column(column)
        for trial in self.trials:
            if trial.status != "RUNNING":
                continue
            value = last_reported(trial).get(self.metric)
            table.add_row(
                trial.trial_id,
                f"{_epoch(trial)}/{self.max_epochs}",
                f"{value:.4f}" if isinstance(value, float) else "-",
                self.hyper(trial.config),
            )
        if not table.rows:  # nothing running: no empty header
            return Group(Text(self.summary_line(), style="bold"), Text(self.best_line()))
        return Group(Text(self.summary_line(), style="bold"), Text(self.best_line()), table)


class Reporter:
    """Prints a Progress: redrawn in place on a terminal, one line per event elsewhere."""

    def __init__(self, progress: Progress, stream: TextIO | None = None, live: bool | None = None):
        self.progress = progress
        self.stream = stream or sys.stdout
        self.live_mode = self.stream.isatty() if live is None else live
        self._live: Any = None
        self.reader_gone = False  # the stream's reader went away: nothing more is written

    def __enter__(self) -> Reporter:
        self._shown = _SHOWING.set(self)
        self._saying = SAYING.set(self.say)  # lines from below the driver (tuner.console.say)
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream)
            # Drawn by rich's own thread twice a second from the current state: Tune's
            # callbacks (many per second) only update the state, never render.
            self._live = Live(
                console=console, get_renderable=self.progress.renderable, refresh_per_second=2, transient=False
            )
            self._live.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        _SHOWING.reset(self._shown)
        SAYING.reset(self._saying)
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None
        else:
            self.say(self.progress.summary_line())

    def say(self, line: str) -> None:
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)  # above the view
        elif not self.reader_gone:
            stamp = _duration(time.monotonic() - self.progress.started)
            self.reader_gone = not show(f"[{stamp:>7}] {line}", self.stream)

    # --- Tune callback hooks (through driver.callbacks.ProgressCallback) --------------------------------------------
    def started(self, trials: list[Any], trial: Any) -> None:
        self.progress.observe(trials)
        self.progress.unended.add(trial.trial_id)  # (a trial PBT or HyperBand paused, started again)
        if not self.live_mode:
            self.say(f"trial {trial.trial_id} started{self.progress.hyper(trial.config, ': {}')}")

    def reported(self, trials: list[Any], trial: Any, result: dict[str, Any]) -> None:
        self.progress.observe(trials)
        better = self.progress.result(trial, result)
        if not self.live_mode:
            value = result.get(self.progress.metric)
            shown = f"{self.progress.metric}={value:.4f}" if isinstance(value, float) else ""
            epoch = int(result.get("training_iteration", 0))
            # (an objective's returned value is a report past train.epochs when it reported each step)
            of = f"/{self.progress.max_epochs}" if epoch <= self.progress.max_epochs else ""
            self.say(f"trial {trial.trial_id} epoch {epoch}{of}: {shown}".rstrip(": "))
        if better and not self.live_mode:  # the live view shows the best itself
            self.say(better)

    def ended(self, trials: list[Any], trial: Any, errored: bool = False, reason: str = "") -> None:
        self.progress.observe(trials)
        if trial.trial_id in self.progress.completed and not errored:
            return  # said already (a trial HyperBand let go is stopped again: tuner/search/tune_hyperband.py)
        self.progress.completed.add(trial.trial_id)
        epoch = _epoch(trial)
        if self.live_mode and not errored:  # counted in the view; an error is printed above it
            return
        if errored:
            self.say(f"trial {trial.trial_id} errored at epoch {epoch + 1}{': ' + reason if reason else ''}")
        elif epoch >= self.progress.max_epochs or last_reported(trial).get(RETURNED):
            self.say(f"trial {trial.trial_id} finished: {epoch} epochs")
        else:
            self.say(f"trial {trial.trial_id} stopped early after epoch {epoch} by the scheduler")

    def retrying(self, trials: list[Any], trial: Any, reason: str, retry: int, retries: int) -> None:
        """A trial that failed and starts again from its last checkpoint (trials.max_failures)."""
        self.progress.observe(trials)
        self.say(
            f"trial {trial.trial_id} failed at epoch {_epoch(trial) + 1}: {reason}; "
            f"retrying from its last checkpoint ({retry} of {retries})"
        )


def show(text: str, stream: TextIO | None = None) -> bool:
    """Print ``text`` and flush it; False when the reader has gone away (a closed pipe).

    A sweep's output is never worth its records: the sweep goes on, and stdout is pointed
    at os.devnull so that no later print (nor Python's flush at exit) fails either."""
    stream = stream or sys.stdout
    try:
        stream.write(text + "\n")  # one write: a line said from another thread (the MLflow writer's) never splits it
        stream.flush()
    except BrokenPipeError:
        if stream is sys.stdout:
            quiet_stdout()
        return False
    return True


def quiet_stdout() -> None:
    """Send what is still to be written to stdout to os.devnull (its reader has gone)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture): nothing to point
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


# The reporter of the sweep this driver runs now: a context, not module state (Tune's
# callbacks, which feed it, run in the thread that called fit()).
_SHOWING: ContextVar[Reporter | None] = ContextVar("tuner_reporter", default=None)


def showing() -> Reporter | None:
    return _SHOWING.get()


def last_reported(trial: Any) -> dict[str, Any]:
    """The trial's last result as Tune's loop has it. Not ``Trial.last_result``: for a trial
    that has not reported since it started, that fetches its process's first figures with a
    blocking ``ray.get`` (1.8 ms a trial start in the loop every trial waits on, at 300 trials)."""
    return trial.run_metadata.last_result or {}


def _epoch(trial: Any) -> int:
    return int(last_reported(trial).get("training_iteration", 0) or 0)


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def hyper_text(config: dict[str, Any], searched: list[str] | None = None) -> str:
    """``optimizer=sgd, momentum=0.9227, lr=0.0075``: the searched names a trial got (None: all)."""
    return values_text({k: v for k, v in config.items() if searched is None or k in searched})
