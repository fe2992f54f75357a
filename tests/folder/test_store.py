"""The sweep folder's owners (tuner/folder/store.py and records.py): claiming, locking,
writes that are whole or absent (on a real, full filesystem), corrupt records named in
one line, and "best".

No Ray: these are the rules every command relies on.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from unittest.mock import ANY

import pytest

from tuner.errors import TunerError
from tuner.folder.records import append_history, best_epoch, read_mlflow_state, trial_histories
from tuner.folder.store import (
    LOCK_FILE,
    StorageError,
    SweepFolder,
    SweepLock,
    append_line,
    claim_new,
    read_json_lines,
    release_unused,
    write_atomic,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmpfs):
    return tmpfs("1m")


def _fill(folder: Path) -> None:
    """Take every free byte of the filesystem under ``folder``."""
    fd = os.open(folder / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 1):  # big blocks, then the last partial one
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


# --- claiming a folder ------------------------------------------------------------------------
def test_a_new_sweep_claims_its_name_then_numbered_folders(tmp_path):
    first = claim_new(tmp_path / "runs", "mnist")
    second = claim_new(tmp_path / "runs", "mnist")
    assert (first.root.name, second.root.name) == ("mnist", "mnist-2")
    # a folder of the user's with that name is never written into
    mine = tmp_path / "runs" / "other"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert claim_new(tmp_path / "runs", "other").root.name == "other-2"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_processes_claiming_at_once_get_different_folders(tmp_path):
    script = "import sys; from tuner.folder.store import claim_new; print(claim_new(sys.argv[1], 'same').root.name)"
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(4)
    ]
    names = sorted(p.communicate(timeout=60)[0].strip() for p in processes)
    assert names == ["same", "same-2", "same-3", "same-4"]


def test_an_unused_claim_is_released_but_a_used_one_is_kept(tmp_path):
    unused = claim_new(tmp_path, "a")
    write_atomic(unused.config, "name: a\n")
    with SweepLock(unused):
        release_unused(unused)
    assert not unused.root.exists()

    used = claim_new(tmp_path, "b")
    write_atomic(used.config, "name: b\n")
    (used.root / "tune").mkdir()
    release_unused(used)
    assert sorted(p.name for p in used.root.iterdir()) == ["sweep.yaml", "tune"]


def test_a_refused_claim_takes_away_the_output_dir_it_made_but_nothing_else(tmp_path):
    (tmp_path / "mine").mkdir()
    first = claim_new(tmp_path / "mine" / "out" / "runs", "a")  # out/ and runs/ are new
    write_atomic(first.config, "name: a\n")
    write_atomic(first.code / "train.py", "print()\n")  # the user's code as the sweep took it
    with SweepLock(first):
        release_unused(first)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == []  # the user's own folder stays

    (tmp_path / "mine" / "runs").mkdir()
    (tmp_path / "mine" / "runs" / "notes.txt").write_text("the user's")
    second = claim_new(tmp_path / "mine" / "runs", "b")  # runs/ was there: never taken away
    write_atomic(second.config, "name: b\n")
    release_unused(second)
    assert sorted(p.name for p in (tmp_path / "mine" / "runs").iterdir()) == ["notes.txt"]


# --- the lock ---------------------------------------------------------------------------------
def test_a_second_process_is_refused_with_the_holders_pid_and_a_killed_holder_leaves_no_lock(tmp_path):
    folder = claim_new(tmp_path, "locked")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time
                from pathlib import Path
                from tuner.folder.store import SweepLock, SweepFolder
                with SweepLock(SweepFolder(Path({str(folder.root)!r}))):
                    print("held", flush=True)
                    time.sleep(120)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TunerError, match=rf"{folder.root} is in use by process {holder.pid} on "):
            with SweepLock(folder):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with SweepLock(folder):  # the kernel dropped the dead holder's lock
        assert json.loads((folder.root / LOCK_FILE).read_text())["pid"] == os.getpid()


# --- writes -----------------------------------------------------------------------------------
def test_atomic_writes_replace_whole_files_with_the_usual_permissions(tmp_path):
    target = tmp_path / "state.json"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_full_disk_keeps_the_old_file_whole_and_says_so_in_one_line(small_fs):
    target = small_fs / "mlflow.json"
    write_atomic(target, json.dumps({"trials": {"a": "run-1"}}))
    _fill(small_fs)
    with pytest.raises(StorageError, match=rf"^{target}: cannot write \(No space left on device\)") as raised:
        write_atomic(target, json.dumps({"trials": {"a": "run-1", "b": "run-2"}}) + " " * 100_000)
    assert "\n" not in str(raised.value)
    assert json.loads(target.read_text()) == {"trials": {"a": "run-1"}}
    assert not [p for p in small_fs.iterdir() if p.name.endswith(".tmp")]


def test_an_append_on_a_full_disk_leaves_no_partial_line(small_fs):
    folder = SweepFolder(small_fs / "sweep")
    append_history(folder, "t1", {"training_iteration": 1, "val_accuracy": 0.5})
    (folder.history / "t1.jsonl").write_text((folder.history / "t1.jsonl").read_text())  # settle its block
    _fill(small_fs)
    ballast = small_fs / "ballast"
    os.truncate(ballast, ballast.stat().st_size - 8192)  # room for part of the next line only
    row = {"training_iteration": 2, "val_accuracy": 0.6, "padding": "x" * 20_000}
    with pytest.raises(StorageError, match="No space left on device"):
        append_line(folder.history / "t1.jsonl", row)
    assert trial_histories(folder) == {"t1": [{"training_iteration": 1, "val_accuracy": 0.5, "reported_at": ANY}]}
    os.unlink(small_fs / "ballast")  # space is back: the record goes on
    append_history(folder, "t1", {"training_iteration": 2, "val_accuracy": 0.6})
    assert [r["training_iteration"] for r in trial_histories(folder)["t1"]] == [1, 2]


def test_an_epoch_re_run_after_a_crash_replaces_the_lost_ones(tmp_path):
    folder = SweepFolder(tmp_path)
    for step in (1, 2, 3):
        assert append_history(folder, "t", {"training_iteration": step, "val_loss": 1.0 / step})
    assert not append_history(folder, "t", {"training_iteration": 2, "val_loss": 0.4})
    assert [(r["training_iteration"], r["val_loss"]) for r in trial_histories(folder)["t"]] == [(1, 1.0), (2, 0.4)]


def test_the_drivers_last_epochs_spare_reading_the_history_back_yet_see_a_re_run(tmp_path, monkeypatch):
    from tuner.folder import records

    folder = SweepFolder(tmp_path)
    append_history(folder, "t", {"training_iteration": 1, "val_loss": 1.0})  # an earlier run of the sweep
    reads, read = [], records.read_json_lines
    monkeypatch.setattr(records, "read_json_lines", lambda path: reads.append(path) or read(path))
    last_epochs: dict[str, int] = {}
    for step, loss in ((2, 0.5), (3, 0.4), (2, 0.45), (3, 0.35)):  # a restart re-runs epochs 2 and 3
        append_history(folder, "t", {"training_iteration": step, "val_loss": loss}, last_epochs)
    assert len(reads) == 2  # the run's first epoch of the trial, and the re-run; not the others
    assert last_epochs == {"t": 3}
    assert [(r["training_iteration"], r["val_loss"]) for r in trial_histories(folder)["t"]] == [
        (1, 1.0), (2, 0.45), (3, 0.35)
    ]  # fmt: skip


def test_a_result_carrying_held_back_epochs_is_recorded_as_each_epoch_alone(tmp_path):
    """A trial that keeps its own checkpoints sends Tune its short epochs together
    (tuner/trial/runner.py): the history gets every epoch as if each had come alone, with
    its own metrics, checkpoint and time, and Tune's keys of the result that brought them."""
    from tuner.folder import EARLIER_EPOCHS, HELD_S
    from tuner.folder.records import epochs_in

    result = {
        "training_iteration": 3,
        "val_accuracy": 0.7,
        "own_checkpoint": "checkpoint_000002",
        "time_total_s": 10.0,
        "trial_id": "t",
        "pid": 42,
        "done": True,
        EARLIER_EPOCHS: [
            {"training_iteration": 1, "val_accuracy": 0.5, "own_checkpoint": "checkpoint_000000", HELD_S: 0.2},
            {"training_iteration": 2, "train_loss": 0.9, "own_checkpoint": "checkpoint_000001", HELD_S: 0.1},
        ],
    }
    epochs = epochs_in(result)
    assert [epoch["training_iteration"] for epoch in epochs] == [1, 2, 3]
    assert [epoch["time_total_s"] for epoch in epochs] == pytest.approx([9.8, 9.9, 10.0])
    assert [epoch["done"] for epoch in epochs] == [False, False, True]
    assert "val_accuracy" not in epochs[1]  # an epoch's metrics are its own, never the last one's
    assert all(epoch["pid"] == 42 and EARLIER_EPOCHS not in epoch and HELD_S not in epoch for epoch in epochs)
    assert epochs_in({"training_iteration": 1}) == [{"training_iteration": 1}]  # a result sent alone

    folder = SweepFolder(tmp_path)
    for epoch in epochs:
        append_history(folder, "t", epoch, {})
    rows = trial_histories(folder)["t"]
    assert [row["checkpoint_dir_name"] for row in rows] == [f"checkpoint_00000{i}" for i in range(3)]
    assert [row.get("val_accuracy") for row in rows] == [0.5, None, 0.7]
    assert all(EARLIER_EPOCHS not in row for row in rows)


# --- corrupt records: one line naming the file ------------------------------------------------
@pytest.mark.parametrize(
    "text, message",
    [
        ('{"training_iteration": 1}\n{"training_iter', r"t\.jsonl:2: not a JSON record"),
        ('{"training_iteration": 1}\n[1, 2]\n', r"t\.jsonl:2: not a JSON record \(got list\)"),
        ('{"val_accuracy": 0.5}\n', r"t\.jsonl:1: a history row without its epoch"),
        (b"\xff\xfe".decode("latin-1"), r"t\.jsonl: cannot be read"),
    ],
    ids=["truncated", "not_an_object", "no_epoch", "not_utf8"],
)
def test_a_corrupt_history_is_one_error_naming_the_file(tmp_path, text, message):
    folder = SweepFolder(tmp_path)
    folder.history.mkdir()
    (folder.history / "t.jsonl").write_bytes(text.encode("latin-1"))
    with pytest.raises(TunerError, match=message) as raised:
        trial_histories(folder)
    assert str(folder.history / "t.jsonl") in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("text", ["{", "[]", '{"trials": []}', '{"tracking_uri": 3}'])
def test_a_malformed_mlflow_run_map_is_one_error_naming_it(tmp_path, text):
    folder = SweepFolder(tmp_path)
    folder.mlflow_state.write_text(text)
    with pytest.raises(TunerError, match=rf"{folder.mlflow_state}: not a readable MLflow run map"):
        read_mlflow_state(folder)


def test_read_json_lines_of_a_missing_file_is_empty(tmp_path):
    assert read_json_lines(tmp_path / "absent.jsonl") == []


# --- the one "best" ---------------------------------------------------------------------------
def _rows(*values: float) -> list[dict]:
    return [{"training_iteration": i + 1, "val_accuracy": v, "val_loss": 1 - v} for i, v in enumerate(values)]


def test_best_is_the_best_epoch_of_any_trial_by_the_metrics_mode():
    histories = {"b": _rows(0.5, 0.9, 0.7), "a": _rows(0.6, 0.8)}
    best = best_epoch(histories, "val_accuracy", "max")
    assert (best.trial_id, best.epoch, best.value) == ("b", 2, 0.9)
    lowest = best_epoch(histories, "val_loss", "min")
    assert (lowest.trial_id, lowest.epoch) == ("b", 2)


def test_trials_that_return_their_value_are_judged_by_it_as_their_study_judges_them():
    # An Optuna objective's trials: t1 reported 0.744 on the way and returned 0.736; t2 was
    # pruned after reporting 0.75; t3 still runs. The study's best is t1's 0.736.
    histories = {
        "t1": [{"training_iteration": 1, "acc": 0.744}, {"training_iteration": 2, "acc": 0.736, "returned": 1}],
        "t2": [{"training_iteration": 1, "acc": 0.75}],
        "t3": [{"training_iteration": 1, "acc": 0.9}],
    }
    best = best_epoch(histories, "acc", "max")
    assert (best.trial_id, best.epoch, best.value) == ("t1", 2, 0.736)
    del histories["t1"]  # until a trial has returned its value: every epoch, as in any sweep
    assert best_epoch(histories, "acc", "max").trial_id == "t3"


def test_ties_go_to_the_first_trial_then_the_first_epoch_whatever_the_order_given():
    histories = {"z": _rows(0.9, 0.9), "m": _rows(0.2, 0.9), "q": _rows(0.9)}
    for ordered in (histories, dict(reversed(list(histories.items())))):
        best = best_epoch(ordered, "val_accuracy", "max")
        assert (best.trial_id, best.epoch) == ("m", 2)


def test_nothing_reported_or_nan_is_no_best():
    assert best_epoch({}, "val_accuracy", "max") is None
    assert best_epoch({"a": [{"training_iteration": 1, "val_accuracy": math.nan}]}, "val_accuracy", "max") is None
    assert best_epoch({"a": [{"training_iteration": 1}]}, "val_accuracy", "max") is None


def test_the_lock_note_names_the_command(tmp_path):
    folder = claim_new(tmp_path, "x")
    with SweepLock(folder):
        note = json.loads(folder.lock.read_text())
    assert note["pid"] == os.getpid() and time.strptime(note["since"], "%Y-%m-%d %H:%M:%S")
    assert note["command"].startswith("python -m tuner")


def test_an_ended_trial_keeps_its_best_checkpoints_and_its_last(tmp_path):
    """What the records callback prunes (driver.callbacks.SweepRecords): of an ended trial's
    checkpoint folders, all but its ``keep`` best by the metric and its last go."""
    import pyarrow.fs

    from tuner.folder.records import kept_checkpoints, prune_checkpoints

    rows = [
        {"training_iteration": epoch, "val_accuracy": accuracy, "checkpoint_dir_name": f"checkpoint_{epoch - 1:06d}"}
        for epoch, accuracy in enumerate([0.5, 0.9, 0.7, 0.95, 0.6], start=1)
    ]
    assert kept_checkpoints(rows, 2, "val_accuracy", "max") == {
        "checkpoint_000003",
        "checkpoint_000001",
        "checkpoint_000004",
    }
    assert kept_checkpoints(rows, 1, "val_accuracy", "min") == {"checkpoint_000000", "checkpoint_000004"}
    trial = tmp_path / "trial_driver_00000"
    for row in rows:
        (trial / row["checkpoint_dir_name"]).mkdir(parents=True)
        (trial / row["checkpoint_dir_name"] / "checkpoint.pt").write_bytes(b"weights")
    (trial / "result.json").write_text("{}\n")
    kept = kept_checkpoints(rows, 2, "val_accuracy", "max")
    assert prune_checkpoints(pyarrow.fs.LocalFileSystem(), str(trial), kept) == 2
    assert sorted(p.name for p in trial.iterdir()) == sorted([*kept, "result.json"])
    assert prune_checkpoints(pyarrow.fs.LocalFileSystem(), str(trial), kept) == 0  # a second time: nothing
    assert prune_checkpoints(pyarrow.fs.LocalFileSystem(), str(tmp_path / "gone"), kept) == 0


def test_a_trials_own_checkpoints_appear_whole_and_the_newest_is_resumed(tmp_path):
    """A trial that keeps its own checkpoints (no Tune `save` round trip: tuner.trial.runner's
    _TuneSession) copies each into its folder under Tune's name, whole or not at all; a
    restart resumes the newest, at the iteration after it."""
    import pyarrow.fs

    from tuner.folder.records import prune_checkpoints
    from tuner.trial.session import latest_own_checkpoint, write_own_checkpoint

    trial, state = tmp_path / "trial_driver_00000", tmp_path / "state"
    trial.mkdir()
    state.mkdir()
    assert latest_own_checkpoint(trial) is None and latest_own_checkpoint(None) is None
    for epoch in (1, 2):
        (state / "checkpoint.pt").write_bytes(f"epoch {epoch}".encode())
        assert write_own_checkpoint(trial, state, epoch) == f"checkpoint_{epoch - 1:06d}"
    (trial / ".checkpoint_000002.999.part").mkdir()  # a copy its killed process never finished
    (trial / "checkpoint_notes").mkdir()  # not a checkpoint's name
    path, iteration = latest_own_checkpoint(trial)
    assert (path.name, iteration) == ("checkpoint_000001", 2)
    assert (path / "checkpoint.pt").read_bytes() == b"epoch 2"

    # Killed after its checkpoint was written, before its report reached the driver: the
    # history holds epoch 1 only, so a restart resumes from epoch 1's and runs epoch 2 again.
    from tuner.folder.records import append_history, recorded_checkpoints

    sweep = SweepFolder(tmp_path)
    append_history(sweep, "t1", {"training_iteration": 1, "val_accuracy": 0.5, "own_checkpoint": "checkpoint_000000"})
    append_history(sweep, "t1", {"training_iteration": 2, "val_accuracy": 0.6})  # (a report without one)
    assert recorded_checkpoints(tmp_path, "t1") == {"checkpoint_000000"}
    assert recorded_checkpoints(tmp_path, "t2") == set()
    path, iteration = latest_own_checkpoint(trial, recorded_checkpoints(tmp_path, "t1"))
    assert (path.name, iteration) == ("checkpoint_000000", 1)
    assert latest_own_checkpoint(trial, set()) is None

    (state / "checkpoint.pt").write_bytes(b"epoch 2 again")  # a restart ran epoch 2 again
    write_own_checkpoint(trial, state, 2)
    assert (trial / "checkpoint_000001" / "checkpoint.pt").read_bytes() == b"epoch 2 again"
    assert (state / "checkpoint.pt").is_file()  # copied: the trial's folder was its own to reuse

    # An ended trial keeps its kept ones; the half-copied folder goes with the others.
    kept = {"checkpoint_000001", "checkpoint_notes"}
    assert prune_checkpoints(pyarrow.fs.LocalFileSystem(), str(trial), kept) == 2
    assert sorted(p.name for p in trial.iterdir()) == ["checkpoint_000001", "checkpoint_notes"]


def test_a_checkpoint_staged_in_the_trials_folder_is_renamed_into_place_and_a_left_one_pruned(tmp_path):
    """A trial that keeps its own checkpoints writes each in its folder first
    (``staged_checkpoint``): the report renames it, no copy; a user's folder there is copied."""
    import pyarrow.fs

    from tuner.folder.records import prune_checkpoints
    from tuner.trial.session import STAGED, Session, staged_checkpoint, write_own_checkpoint

    trial = tmp_path / "trial_driver_00000"
    trial.mkdir()

    class Here(Session):
        def staging_dir(self):
            return trial

    with staged_checkpoint(Here()) as staged:
        (Path(staged) / "checkpoint.pt").write_bytes(b"epoch 1")
        inode = (Path(staged) / "checkpoint.pt").stat().st_ino
        assert write_own_checkpoint(trial, staged, 1) == "checkpoint_000000"
        assert not Path(staged).exists()  # moved: nothing left for the staging folder's cleanup
    assert (trial / "checkpoint_000000" / "checkpoint.pt").stat().st_ino == inode
    assert sorted(p.name for p in trial.iterdir()) == ["checkpoint_000000"]

    own = trial / "last"  # a user's function's own folder in the trial's folder: copied, kept
    own.mkdir()
    (own / "state.pt").write_bytes(b"epoch 2")
    write_own_checkpoint(trial, own, 2)
    assert (own / "state.pt").read_bytes() == (trial / "checkpoint_000001" / "state.pt").read_bytes()

    left = Path(tempfile.mkdtemp(prefix=STAGED, suffix=".part", dir=trial))  # a killed trial's, never cleaned
    assert prune_checkpoints(pyarrow.fs.LocalFileSystem(), str(trial), {"checkpoint_000000"}) == 2
    assert not left.exists() and sorted(p.name for p in trial.iterdir()) == ["checkpoint_000000", "last"]


def test_a_trial_error_tune_kept_as_text_is_read_for_a_full_disk_too(tmp_path):
    """Tune gives a trial's error as a string where it could not keep the exception (a trial
    process it could not reuse): read as the text it is, not followed to a cause it lacks."""
    from tuner.folder.store import StorageError, failed_write

    assert failed_write("TuneError: the trial's actor could not be reused", tmp_path) is None
    found = failed_write("OSError: [Errno 28] No space left on device", tmp_path)
    assert isinstance(found, StorageError) and str(tmp_path) in str(found)
