"""A sweep never stalls on a trial gone silent, and a failed trial is one line: a user's
training function, in a folder tuner never saw, that reports and then blocks for ever (as
a stuck DataLoader worker or a lost mount does), run as a user runs it (``python -m tuner``
in a subprocess, a local Ray of its own)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import textwrap
import time
import types
from pathlib import Path

import pytest
from integration_helpers import assert_no_leaks, data_root, ray_start_cluster, tuner_cli, users_sweep

from tuner.driver.stalls import AUTO_FACTOR, AUTO_FLOOR_S, StallWatch, limit_s
from tuner.driver.sweep import run_sweep
from tuner.errors import TunerError
from tuner.folder.records import read_timeline, stall_reasons, trial_histories
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig
from tuner.trial.session import ALIVE_FILE

HANGING = textwrap.dedent(
    """
    import threading
    import time

    MODES = {0.1: "never", 0.2: "once", 0.3: "always", 0.4: "raises"}


    def train(params, context):
        mode = MODES[params["x"]]
        for epoch in range(context.start_epoch, context.max_epochs):
            time.sleep(0.2)
            if mode == "raises" and epoch + 1 == 2:
                raise ValueError("the labels file is empty")
            folder = context.trial_dir / "state"
            folder.mkdir(exist_ok=True)
            (folder / "epoch").write_text(str(epoch + 1))
            context.report({"score": params["x"] * (epoch + 1)}, checkpoint=folder)
            # "once": only before its first retry; "always": after the first report of every start
            if mode == "always" and epoch == context.start_epoch or mode == "once" and context.checkpoint is None:
                wait_for_the_lost_mount()


    def wait_for_the_lost_mount():
        threading.Event().wait()
    """
)


def test_limit_is_fixed_off_or_generous_and_adaptive():
    assert limit_s(None, 100.0) is None
    assert limit_s(20, 1000.0) == 20.0
    assert limit_s("auto", None) is None  # no silence has ended yet: an epoch's length is unknown
    assert limit_s("auto", 0.0) == AUTO_FLOOR_S
    assert limit_s("auto", 1000.0) == AUTO_FACTOR * 1000.0


class _Trial:
    """What the watchdog reads of a Tune trial."""

    def __init__(self, trial_id: str, path: Path):
        self.trial_id, self.path, self.status = trial_id, str(path), "RUNNING"
        self.run_metadata = types.SimpleNamespace(last_result={"training_iteration": 1})  # Tune's loop's copy
        self.temporary_state = types.SimpleNamespace(ray_actor=None)


def test_training_steps_keep_a_long_epoch_alive_and_their_end_is_a_stall(tmp_path):
    """tuner's loop touches its heartbeat between steps: a trial that reports once an hour
    but trains all the while is alive; once its steps stop too, it is stalled."""
    folder = SweepFolder(tmp_path / "sweep")
    trial = _Trial("t1", folder.tune / "trial_t1")
    Path(trial.path).mkdir(parents=True)
    watch = StallWatch(folder, 30)
    watch.on_trial_start(0, [trial], trial)
    now = time.time()
    watch.clocks["t1"].sign = watch.clocks["t1"].report = now - 100  # reported 100 s ago
    beat = Path(trial.path) / ALIVE_FILE
    beat.touch()  # ... and trained a step just now
    watch.on_step_end(0, [trial])
    assert not watch.killed and watch.slowest == pytest.approx(100, abs=2)

    os.utime(beat, (now - 40, now - 40))  # its last step 40 s ago, its last sign too
    watch.clocks["t1"].sign = now - 40
    watch.next_look = 0.0
    watch.on_step_end(0, [trial])
    assert watch.killed == {"t1"}
    [event] = [e for e in read_timeline(folder) if e["event"] == "stall"]
    assert re.fullmatch(
        r"stalled: no report for 10\d s after epoch 1 \(no training step for the last 4\d s\); "
        r"its threads' stacks: tune/trial_t1/stall-stacks.txt",
        event["reason"],
    ), event


def test_a_stall_is_the_reason_until_the_trial_starts_again():
    events = [
        {"trial_id": "a", "event": "start"},
        {"trial_id": "a", "event": "stall", "reason": "stalled: no report for 9 s after epoch 1"},
        {"trial_id": "b", "event": "stall", "reason": "stalled: no report for 9 s after epoch 2"},
        {"trial_id": "b", "event": "recover"},
        {"trial_id": "b", "event": "start"},
    ]
    assert stall_reasons(events) == {"a": "stalled: no report for 9 s after epoch 1"}


def test_the_watchdog_starts_its_clocks_anew_after_a_resume():
    watch = StallWatch(SweepFolder(Path("runs/x")), 20.0)
    watch.on_trial_start(0, [], _Trial("t1", Path("runs/x/tune/t1")))
    watch.slowest = 50.0
    import cloudpickle

    restored = cloudpickle.loads(cloudpickle.dumps(watch))
    assert restored.clocks == {} and restored.slowest is None and restored.setting == 20.0


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_hung_function_is_stopped_with_its_stacks_retried_and_the_sweep_ends_by_itself(tmp_path, ray_tmp):
    sweep_file = users_sweep(
        tmp_path,
        {"hangs.py": HANGING},
        {
            "name": "hangs",
            "trainable": "hangs:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 3},
            "space": {"params": {"x": {"grid": [0.1, 0.2, 0.3, 0.4]}}},
            "scheduler": {"name": "fifo"},
            "trials": {"num_samples": 1, "max_failures": 1, "stall_timeout_s": 8},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env={"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())})
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-4000:]
    root = tmp_path / "runs" / "hangs"
    histories = trial_histories(SweepFolder(root))
    by_mode = {round(rows[0]["score"], 3): trial for trial, rows in histories.items()}
    never, once, always, raises = (by_mode[x] for x in (0.1, 0.2, 0.3, 0.4))
    epochs = {trial: [row["epoch"] for row in rows] for trial, rows in histories.items()}
    assert epochs[never] == [1, 2, 3]
    assert epochs[once] == [1, 2, 3]  # stopped after epoch 1, retried from that checkpoint, finished
    assert epochs[always] == [1, 2]  # stopped after epoch 1, retried, stopped after epoch 2: out of retries
    assert epochs[raises] == [1]

    # the stacks, taken before the kill, show the line it hung on
    for trial, stalls in ((once, 1), (always, 2)):
        [stacks] = root.glob(f"tune/*{trial}*/stall-stacks.txt")
        text = stacks.read_text()
        assert text.count(f"trial {trial} stalled: no report for") == stalls, text[:2000]
        assert "wait_for_the_lost_mount (hangs.py" in text, text[:3000]
    assert not list(root.glob(f"tune/*{never}*/stall-stacks.txt"))

    # one line per failure, with its reason; no Ray traceback on the console
    assert re.search(
        rf"trial {once} failed at epoch 2: stalled: no report for \d+ s after epoch 1; its threads' stacks: "
        rf"tune/[^ ]*{once}[^ ]*/stall-stacks.txt; retrying from its last checkpoint \(1 of 1\)",
        console,
    ), console[-4000:]
    assert re.search(rf"trial {always} errored at epoch 3: stalled: no report for \d+ s after epoch 2", console)
    assert re.search(rf"trial {raises} errored at epoch 2: ValueError: the labels file is empty", console)
    assert "Traceback" not in console and "Trial task failed" not in console, console[-4000:]
    [last_lines] = [line for line in console.splitlines() if line.startswith("  stalled: ")]  # the outcome's
    assert f"{always} (twice, errored)" in last_lines and f"{once} (once, retried)" in last_lines, last_lines

    # status and MLflow say which trials stalled
    status = tuner_cli("status", str(root))
    assert re.search(rf"{always}\s+errored\b", status.stdout), status.stdout
    assert re.search(rf"{once}\s+finished\s+3\b", status.stdout), status.stdout
    assert "stalled: no report for" in status.stdout, status.stdout
    assert set(stall_reasons(read_timeline(SweepFolder(root)))) == {always}
    from mlflow.tracking import MlflowClient

    state = json.loads((root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = {
        r.data.tags["tuner.trial_id"]: r
        for r in client.search_runs([state["experiment_id"]], "")
        if "tuner.trial_id" in r.data.tags
    }
    assert runs[always].info.status == "FAILED"
    assert runs[always].data.tags["tuner.stalled"].startswith("stalled: no report for")
    assert runs[once].info.status == "FINISHED" and "tuner.stalled" in runs[once].data.tags  # it stalled once
    assert "tuner.stalled" not in runs[never].data.tags


HANGING_SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import threading

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to SIGTERM as well
    open(sys.argv[1], "w").write(str(os.getpid()))
    print("epoch 1: val_accuracy=0.5", flush=True)


    def read_from_the_lost_mount():
        threading.Event().wait()


    read_from_the_lost_mount()
    """
)


@pytest.fixture
def another_ray():
    """Another Ray up on this machine meanwhile, as a second sweep's is: the watchdog must ask
    the state API about its own sweep's Ray (with no address, the API refuses to choose)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="tro", dir="/tmp"))  # short: socket paths
    with ray_start_cluster(temp_dir, head_cpus=1, workers=0) as other:
        yield other
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_hung_command_is_stopped_with_its_python_stacks_and_leaves_no_process(tmp_path, ray_tmp, another_ray):
    pid_file = tmp_path / "command.pid"
    sweep_file = users_sweep(
        tmp_path,
        {"train.py": HANGING_SCRIPT},
        {
            "name": "hung_command",
            "command": ["python", "train.py", str(pid_file)],
            "train": {"epochs": 2},
            "space": {"params": {"x": 1}},
            "trials": {"num_samples": 1, "stall_timeout_s": 5},
            "tracking": {"mlflow": {"enabled": False}},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env={"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())})
    console = done.stdout + done.stderr
    assert re.search(r"errored at epoch 2: stalled: no report for \d+ s after epoch 1", console), console[-3000:]
    root = tmp_path / "runs" / "hung_command"
    [stacks] = root.glob("tune/*/stall-stacks.txt")
    assert "read_from_the_lost_mount (train.py" in stacks.read_text(), stacks.read_text()[-3000:]
    assert not Path(f"/proc/{pid_file.read_text()}").exists()  # the command did not outlive its trial


STUCK_RANK = """
import threading


def train(params, context):
    if context.rank == 1:  # as a rank stuck in a collective, a DataLoader or a read
        wait_in_the_collective()
    context.report({"score": 1.0})


def wait_in_the_collective():
    threading.Event().wait()
"""


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_ddp_trial_with_a_stuck_rank_is_stopped_with_every_ranks_stacks_and_leaves_nothing(local_ray, tmp_path):
    code = tmp_path / "my_project"
    code.mkdir()
    (code / "stuck.py").write_text(STUCK_RANK)
    sweep = SweepConfig.model_validate(
        {
            "name": "stuck",
            "output_dir": str(tmp_path / "runs"),
            "trainable": "stuck:train",
            "code_dir": str(code),
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 1},
            "space": {"params": {"x": 1}},
            # the clock runs from the trial's start: both ranks must be up inside it, which took
            # over 25 s on a loaded 2-core machine (rank 1 had not noted itself: no stacks of its)
            "trials": {"num_samples": 1, "stall_timeout_s": 45},
            "scaling": {"workers": 2, "cpus_per_worker": 1},
            "tracking": {"mlflow": {"enabled": False}},
        }
    )
    # (In-process, on this module's own Ray: the leak check below asks that Ray.)
    with pytest.raises(TunerError, match="no trial reported"):
        run_sweep(sweep)  # its one trial stalled: nothing to export
    root = tmp_path / "runs" / "stuck"
    [stacks] = root.glob("tune/*/stall-stacks.txt")
    text = stacks.read_text()
    assert "stalled: no report for" in text and "before its first epoch" in text
    rank_1 = text.split("--- Ray Train rank 1", 1)[1]  # the rank that hung, and where
    assert "wait_in_the_collective (stuck.py" in rank_1, text[-3000:]
    assert "--- Ray Train rank 0" in text
    assert_no_leaks()  # the Train controller, both workers and their placement group are gone
