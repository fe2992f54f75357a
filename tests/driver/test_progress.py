"""The progress view: one plain line per event off a terminal, a redrawn view on one.
Fed with trials shaped as Tune's (trial_id, status, config, last_result)."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest

from tuner.driver.callbacks import ProgressCallback
from tuner.driver.progress import Progress, Reporter, showing
from tuner.folder.records import BestEpoch


class _Trial(SimpleNamespace):
    @property
    def run_metadata(self) -> SimpleNamespace:  # where Tune keeps last_result (tuner.driver.progress.last_reported)
        return SimpleNamespace(last_result=self.last_result)


def _trial(trial_id: str, lr: float, status: str = "RUNNING", epoch: int = 0, value: float | None = None):
    last = {"training_iteration": epoch, **({"val_accuracy": value} if value is not None else {})}
    return _Trial(trial_id=trial_id, status=status, config={"lr": lr}, last_result=last)


def _progress(**kwargs) -> Progress:
    return Progress("mnist_asha", "val_accuracy", "max", total_trials=3, max_epochs=3, **kwargs)


def test_off_a_terminal_every_event_is_one_plain_line_through_the_tune_callback():
    stream = io.StringIO()
    a, b = _trial("a_00000", 0.002), _trial("b_00001", 0.001)
    callback = ProgressCallback()

    def epoch(trial, number: int, value: float) -> None:
        trial.last_result = {"training_iteration": number, "val_accuracy": value}
        callback.on_trial_result(0, [a, b], trial, trial.last_result)

    def end(trial) -> None:
        trial.status = "TERMINATED"
        callback.on_trial_complete(0, [a, b], trial)

    with Reporter(_progress(), stream=stream, live=False):
        callback.on_trial_start(0, [a], a)
        callback.on_trial_start(0, [a, b], b)
        epoch(a, 1, 0.9)
        epoch(b, 1, 0.8)
        end(b)
        epoch(a, 2, 0.95)
        epoch(a, 3, 0.94)
        end(a)
    assert showing() is None  # the callback feeds only the reporter being shown
    lines = [re.sub(r"^\[\s*\d+s\] ", "", line) for line in stream.getvalue().splitlines()]
    assert lines == [
        "trial a_00000 started: lr=0.002",
        "trial b_00001 started: lr=0.001",
        "trial a_00000 epoch 1/3: val_accuracy=0.9000",
        "best so far: a_00000 val_accuracy=0.9000 at epoch 1 (lr=0.002)",
        "trial b_00001 epoch 1/3: val_accuracy=0.8000",
        "trial b_00001 stopped early after epoch 1 by the scheduler",
        "trial a_00000 epoch 2/3: val_accuracy=0.9500",
        "best so far: a_00000 val_accuracy=0.9500 at epoch 2 (lr=0.002)",
        "trial a_00000 epoch 3/3: val_accuracy=0.9400",
        "trial a_00000 finished: 3 epochs",
        lines[-1],
    ]
    assert lines[-1].startswith("mnist_asha 2/3 done: 1 finished, 1 stopped early | ")


def test_on_a_terminal_one_view_shows_counts_running_trials_the_best_and_time_left():
    from rich.console import Console

    progress = _progress()
    trials = [
        _trial("a_00000", 0.002, "RUNNING", 2, 0.95),
        _trial("b_00001", 0.001, "TERMINATED", 1, 0.8),
        _trial("c_00002", 0.003, "ERROR", 1, 0.7),
    ]
    progress.observe(trials)
    for _ in range(3):
        progress.result(trials[0], trials[0].last_result)
    console = Console(file=io.StringIO(), width=140, record=True, force_terminal=True)
    console.print(progress.renderable())
    text = console.export_text()
    assert "mnist_asha 2/3 done: 1 stopped early, 1 errored | 1 running | " in text
    assert "left" in text  # epochs remain and the pace is known
    assert "best so far: a_00000 val_accuracy=0.9500 at epoch 2 (lr=0.002)" in text
    [row] = [line for line in text.splitlines() if line.startswith("a_00000")]
    assert row.split()[:3] == ["a_00000", "2/3", "0.9500"]
    assert "b_00001" not in text.split("best so far")[1]  # only running trials are listed


def test_a_resumed_sweep_starts_from_its_recorded_best_and_names_its_hyperparameters():
    progress = _progress()
    progress.seed(BestEpoch(trial_id="b_00001", epoch=2, value=0.97, row={}))
    assert progress.best_line() == "best so far: b_00001 val_accuracy=0.9700 at epoch 2"  # config not known yet
    progress.observe([_trial("a_00000", 0.002), _trial("b_00001", 0.001, "TERMINATED", 3, 0.96)])
    assert progress.best_line() == "best so far: b_00001 val_accuracy=0.9700 at epoch 2 (lr=0.001)"
    assert progress.result(_trial("a_00000", 0.002), {"training_iteration": 1, "val_accuracy": 0.9}) is None


def test_the_callback_tune_pickles_with_the_sweep_feeds_the_reporter_of_the_resumed_run():
    """Tune restores its callbacks from tuner.pkl on resume: the restored one must still
    reach the reporter the resuming process shows (not one it held when pickled)."""
    from ray import cloudpickle

    restored = cloudpickle.loads(cloudpickle.dumps(ProgressCallback()))
    stream = io.StringIO()
    a = _trial("a_00000", 0.002)
    with Reporter(_progress(), stream=stream, live=False):
        restored.on_trial_start(0, [a], a)
        a.last_result = {"training_iteration": 1, "val_accuracy": float("nan")}
        restored.on_trial_result(0, [a], a, a.last_result)
        a.last_result = {"training_iteration": 2, "val_accuracy": 0.9}
        restored.on_trial_result(0, [a], a, a.last_result)
    lines = [re.sub(r"^\[\s*\d+s\] ", "", line) for line in stream.getvalue().splitlines()]
    assert lines[0] == "trial a_00000 started: lr=0.002"
    assert "best so far: a_00000 val_accuracy=0.9000 at epoch 2 (lr=0.002)" in lines  # NaN was never best


def test_a_sweep_stopped_by_ctrl_c_counts_its_trials_interrupted_and_pending_not_stopped_early():
    stream = io.StringIO()
    a, b, c = _trial("a_00000", 0.002), _trial("b_00001", 0.001), _trial("c_00002", 0.003, "PENDING")
    trials = [a, b, c]
    callback = ProgressCallback()
    with Reporter(_progress(), stream=stream, live=False):
        callback.on_trial_start(0, trials, a)
        callback.on_trial_start(0, trials, b)
        b.last_result = {"training_iteration": 1, "val_accuracy": 0.8}
        b.status = "TERMINATED"  # the scheduler stops b, and says so
        callback.on_trial_complete(0, trials, b)
        a.last_result = {"training_iteration": 2, "val_accuracy": 0.9}
        callback.on_step_end(0, trials)
        for trial in (a, c):  # Ctrl-C: Tune ends the rest without a callback
            trial.status = "TERMINATED"
    last = stream.getvalue().splitlines()[-1]
    assert re.sub(r"^\[\s*\d+s\] ", "", last).startswith("mnist_asha 1/3 done: 1 stopped early | 1 interrupted | ")


class _ClosedPipe(io.StringIO):
    """A stream whose reader has gone away (``tuner sweep ... | head``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def write(self, text: str) -> int:
        self.tries += 1
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_goes_away_quiets_the_progress_but_never_stops_the_sweep():
    stream = _ClosedPipe()
    a = _trial("a_00000", 0.002)
    callback = ProgressCallback()
    with Reporter(_progress(), stream=stream, live=False) as reporter:
        callback.on_trial_start(0, [a], a)  # the first line meets the closed pipe
        for epoch, value in ((1, 0.9), (2, 0.95), (3, 0.94)):
            a.last_result = {"training_iteration": epoch, "val_accuracy": value}
            callback.on_trial_result(0, [a], a, a.last_result)
        a.status = "TERMINATED"
        callback.on_trial_complete(0, [a], a)
    assert stream.tries == 1  # quiet from then on: no write tried again
    assert reporter.reader_gone
    # The sweep's own bookkeeping went on: the best, the counts.
    assert reporter.progress.best_line() == "best so far: a_00000 val_accuracy=0.9500 at epoch 2 (lr=0.002)"
    assert reporter.progress.counts()["finished"] == 1


def test_a_sweep_line_on_a_closed_stdout_goes_to_devnull_and_nothing_fails_at_exit():
    """What the driver prints (the plan, notes) through show(): after the reader has gone,
    later prints and Python's flush at exit go to os.devnull, not to a traceback."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from tuner.driver.progress import show\n"
        "shown = [show('x' * 99) for _ in range(5000)]\n"  # 500 KB: more than a pipe holds
        "print('the outcome, after the reader has gone')\n"
        "sys.exit(0 if not all(shown) else 3)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ
    )
    assert process.stdout.readline() == b"x" * 99 + b"\n"
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(timeout=60)
    assert process.returncode == 0 and stderr == ""


def test_after_ctrl_c_the_time_left_counts_the_interrupted_and_pending_trials_epochs():
    """Tune marks the trials Ctrl-C stopped TERMINATED; what is left is what a resume runs."""
    progress = _progress()  # 3 trials of 3 epochs
    a, b, c = _trial("a_00000", 0.002), _trial("b_00001", 0.001), _trial("c_00002", 0.003, "PENDING")
    progress.observe([a, b, c])
    b.status, b.last_result = "TERMINATED", {"training_iteration": 1, "val_accuracy": 0.8}
    progress.completed.add(b.trial_id)  # the scheduler stopped b, and said so
    a.last_result = {"training_iteration": 2, "val_accuracy": 0.9}
    for trial in (a, c):  # Ctrl-C: Tune ends the rest without a callback
        trial.status = "TERMINATED"
    progress.epochs_seen, progress.first_epoch_at = 3, progress.started  # 3 epochs in the run so far
    assert [progress.state(t) for t in (a, b, c)] == ["interrupted", "stopped early", "pending"]
    progress.first_epoch_at -= 10  # 5 s per epoch; a's third epoch and c's three: 20 s left
    assert progress.seconds_left() == pytest.approx(20, abs=1)
    line = progress.summary_line()
    assert re.search(r"\| 1 interrupted \| \d+s, at most ~(20|21)s left$", line), line


def test_a_trial_is_seen_unended_where_it_first_appears_or_starts_and_only_then():
    """observe() looks only at the trials Tune added since its last look; what it finds is
    what a full look would find: an interrupted trial is one seen unended."""
    progress = _progress()
    a, b = _trial("a_00000", 0.01), _trial("b_00000", 0.02, "PENDING")
    progress.observe([a, b])
    assert progress.unended == {"a_00000", "b_00000"}
    c = _trial("c_00000", 0.03, "TERMINATED", 3, 0.9)  # ended before any look: never unended
    a.status = "TERMINATED"
    progress.observe([a, b, c])
    progress.observe([a, b, c])
    assert progress.unended == {"a_00000", "b_00000"}
    reporter = Reporter(progress, stream=io.StringIO(), live=False)
    reporter.started([a, b, c], c)  # started again (a paused trial resumed): unended once more
    assert progress.unended == {"a_00000", "b_00000", "c_00000"}


def test_a_fast_sweep_stopped_with_trials_to_run_never_shows_0s_left():
    progress = _progress()
    a = _trial("a_00000", 0.002, "TERMINATED", 1, 0.9)
    progress.unended.add(a.trial_id)  # seen running, ended by Ctrl-C
    progress.observe([a])
    progress.epochs_seen, progress.first_epoch_at = 2, time.monotonic()  # epochs of a millisecond
    assert 0 < progress.seconds_left() < 1
    assert progress.summary_line().endswith(", at most ~1s left")


@pytest.mark.parametrize("live", [False, True])
def test_a_line_said_below_the_driver_from_another_thread_goes_through_the_reporter(live):
    """A line from a thread below the driver, in a copy of the callback's context (as the MLflow
    writer's lines once were): stamped off a terminal, above the view on one; printed with none."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from tuner import console

    stream = io.StringIO()
    with Reporter(_progress(), stream=stream, live=live), ThreadPoolExecutor(max_workers=1) as writer:
        writer.submit(contextvars.copy_context().run, console.say, "MLflow at http://x is unreachable").result()
    first = stream.getvalue().splitlines()[0]
    assert first == ("MLflow at http://x is unreachable" if live else "[     0s] MLflow at http://x is unreachable")
    assert console.SAYING.get() is None  # the reporter's say ends with it


def test_a_trial_that_misses_the_constraints_is_never_the_best_so_far():
    """Issue 42: the live best is the feasible best, as status and the export's are; a metric
    reported once (params, at epoch 1) holds for the epochs after it."""
    from tuner.folder.constraints import parse

    progress = _progress(constraints=(parse("params < 200000"),))
    big, small = _trial("a_00000", 0.002), _trial("b_00001", 0.001)
    assert progress.result(big, {"training_iteration": 1, "val_accuracy": 0.97, "params": 600_000.0}) is None
    said = progress.result(small, {"training_iteration": 1, "val_accuracy": 0.90, "params": 150_000.0})
    assert said == "best so far: b_00001 val_accuracy=0.9000 at epoch 1 (lr=0.001)"
    assert progress.result(small, {"training_iteration": 2, "val_accuracy": 0.93}).startswith("best so far: b_00001")
    assert progress.result(big, {"training_iteration": 2, "val_accuracy": 0.99}) is None
    assert progress.best.trial_id == "b_00001" and progress.best.value == 0.93


def test_an_objectives_best_so_far_is_the_best_returned_value_once_a_trial_has_returned_one():
    """As status, best and the export (tuner.folder.records.best_epoch) and an Optuna study
    judge it: what a trial reports on the way is for the pruner; what it returns counts."""
    from tuner.folder import RETURNED

    progress = _progress()
    a, b = _trial("a_00000", 0.002), _trial("b_00001", 0.001)
    assert progress.result(a, {"training_iteration": 1, "val_accuracy": 0.95}).startswith("best so far: a_00000")
    said = progress.result(b, {"training_iteration": 2, "val_accuracy": 0.80, RETURNED: True})
    assert said == "best so far: b_00001 val_accuracy=0.8000 at epoch 2 (lr=0.001)"
    assert progress.result(a, {"training_iteration": 2, "val_accuracy": 0.99}) is None  # on the way
    assert progress.result(a, {"training_iteration": 3, "val_accuracy": 0.85, RETURNED: True}).startswith(
        "best so far: a_00000 val_accuracy=0.8500"
    )
    resumed = _progress()
    resumed.seed(BestEpoch(trial_id="a_00000", epoch=3, value=0.85, row={RETURNED: True}))
    assert resumed.result(b, {"training_iteration": 1, "val_accuracy": 0.99}) is None
