"""A user's work is never lost or mixed, tried as a user would: the CLI in subprocesses,
each with its own local Ray, on real MNIST images and a real MLflow store.

- the same sweep run twice: a second folder, a second MLflow parent, nothing mixed;
- a process that wants a folder another process is writing is refused, naming it;
- two different sweeps at once in one output folder (one sqlite store): both complete;
- a full disk (a real small tmpfs) stops the sweep in one line; resume finishes it;
- an errored trial is retried by resume from its checkpoint;
- export --to with torchscript, and every bad input of the table: one line, exit 2.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from integration_helpers import data_root, mlflow_children, small_sweep, start_sweep, tuner_cli, wait_for_results

from tuner.folder.records import STATE_COPY_SUFFIX, best_epoch, trial_histories
from tuner.folder.store import SweepFolder
from tuner.invocation import tuner_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200), pytest.mark.usefixtures("warm_ray")]


def _sweep_file(tmp_path: Path, name: str = "it", **sections) -> Path:
    """Two trials (a grid of two learning rates) x 2 epochs on 1000 images; sections override."""
    defaults = {
        "data": {"train_subset": 1000},
        "train": {"epochs": 2},
        "space": {"params": {"lr": {"grid": [3e-3, 1e-3]}}},
        "trials": {"num_samples": 1},
    }
    sweep = small_sweep(tmp_path, **{**defaults, **sections})
    sweep["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    """Exit 2 and one ``tuner: error:`` line: what every user error must look like."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("tuner: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[0]


def _ends_in_one_line_error(result: subprocess.CompletedProcess) -> str:
    """A fault of the machine: exit 2 and the run ends in one ``tuner: error:`` line (Ray's
    own log of the failed trial may come before it)."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("tuner: error:")]
    assert len(lines) == 1 and result.stderr.strip().splitlines()[-1] == lines[0], result.stderr[-3000:]
    return lines[0]


def _mlflow(root: Path):
    from mlflow.tracking import MlflowClient

    state = json.loads((root / "mlflow.json").read_text())
    return MlflowClient(state["tracking_uri"]), state


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished sweep, run with the CLI: (sweep file, its folder)."""
    tmp_path = tmp_path_factory.mktemp("finished")
    sweep_file = _sweep_file(tmp_path)
    _ok(tuner_cli("sweep", str(sweep_file)))
    return sweep_file, tmp_path / "runs" / "it"


def _agree(root: Path) -> str:
    """status, best, the export and MLflow name the same best trial; returns it."""
    histories = trial_histories(SweepFolder(root))
    best = best_epoch(histories, "val_accuracy", "max")
    exported = json.loads((root / "best" / "metrics.json").read_text())
    assert (exported["trial_id"], exported["epoch"]) == (best.trial_id, best.epoch)
    status = _ok(tuner_cli("status", str(root), timeout=120)).stdout
    assert f"best so far: {best.trial_id} at epoch {best.epoch}:" in status
    assert all(trial_id in status for trial_id in histories)
    shown = _ok(tuner_cli("best", str(root), timeout=120)).stdout
    assert shown.startswith(f"best trial {best.trial_id} ")
    client, state = _mlflow(root)
    parent = client.get_run(state["parent_run_id"])
    assert parent.data.tags["tuner.best_trial_id"] == best.trial_id
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(best.value)
    steps = mlflow_children(root)
    assert set(steps) == set(histories)
    for trial_id, rows in histories.items():
        assert steps[trial_id] == [row["training_iteration"] for row in rows]
    return best.trial_id


# --- a second run ------------------------------------------------------------------------------
def test_the_same_sweep_twice_gets_a_folder_of_its_own_and_mixes_nothing(finished):
    sweep_file, first = finished
    before = {p.relative_to(first): p.stat().st_mtime_ns for p in first.rglob("*") if p.is_file()}

    again = _ok(tuner_cli("sweep", str(sweep_file)))
    second = first.with_name("it-2")
    assert f"output: {second}" in again.stdout
    assert f"({first} holds an earlier, finished run of this sweep, kept as it is)" in again.stdout
    assert f"exported to {second / 'best'}" in again.stdout
    # Off a terminal: tuner's own line per event, not Ray's tables, boxes and hints.
    for trial_id in trial_histories(SweepFolder(second)):
        assert re.search(rf"^\[ *\d+s\] trial {trial_id} started: ", again.stdout, re.M), again.stdout
        assert re.search(rf"^\[ *\d+s\] trial {trial_id} epoch 1/2: val_accuracy=0\.\d{{4}}$", again.stdout, re.M)
        assert re.search(rf"trial {trial_id} (finished: 2 epochs|stopped early after epoch 1)", again.stdout)
    assert re.search(r"^\[ *\d+s\] best so far: ", again.stdout, re.M)
    assert re.search(r"^\[ *\d+s\] it 2/2 done: ", again.stdout, re.M)
    assert f"look further: {tuner_command()} report {second}" in again.stdout  # the command that works here
    assert f"{tuner_command()} status {second}" in again.stdout
    noises = ("Trial status:", "\u256d", "tensorboard --logdir", "Token authentication is enabled", "Add type hints")
    for noise in (*noises, "Successfully registered model", "INFO mlflow", "Downloading artifacts"):
        assert noise not in again.stdout + again.stderr, noise
    after = {p.relative_to(first): p.stat().st_mtime_ns for p in first.rglob("*") if p.is_file()}
    assert after == before, "the second run touched the first run's folder"

    first_trials = set(trial_histories(SweepFolder(first)))
    second_trials = set(trial_histories(SweepFolder(second)))
    assert len(first_trials) == len(second_trials) == 2 and not first_trials & second_trials
    _agree(first)
    _agree(second)
    client, state = _mlflow(second)
    _, first_state = _mlflow(first)
    assert state["experiment_id"] == first_state["experiment_id"]  # one experiment per sweep name
    assert state["parent_run_id"] != first_state["parent_run_id"]
    assert client.get_run(state["parent_run_id"]).info.run_name == "it-2"
    versions = {v.version: v.tags["sweep"] for v in client.search_model_versions("name='mnist_cnn'")}
    assert sorted(versions.values()) == ["it", "it-2"]


def test_a_folder_in_use_is_refused_naming_the_process(tmp_path, ray_tmp):
    # Long enough (2 x 8 epochs on 3000 images) that both refusals come while it runs.
    sweep_file = _sweep_file(tmp_path, data={"train_subset": 3000}, train={"epochs": 8})
    root = tmp_path / "runs" / "it"
    process = start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)})
    try:
        wait_for_results(root, 1, process)
        for command in (["resume", str(root)], ["export", str(root), "--overwrite"]):
            line = _one_line_error(tuner_cli(*command, timeout=120))
            assert f"{root} is in use by process {process.pid} on " in line, line
            assert "python -m tuner sweep" in line
    finally:
        stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]
    assert (root / "best" / "model.pt").is_file()


def test_two_sweeps_at_once_in_one_output_folder_both_complete(tmp_path, ray_tmp):
    files = [_sweep_file(tmp_path, name) for name in ("left", "right")]
    processes = [start_sweep(path, env={"RAY_TMPDIR": str(ray_tmp)}) for path in files]
    outputs = [process.communicate(timeout=900) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
        assert "database is locked" not in stderr
    for name in ("left", "right"):
        root = tmp_path / "runs" / name
        # its own Tune state only: two sweeps whose experiments began in one second staged both in one folder
        assert len(list((root / "tune").glob("experiment_state-*.json"))) == 1
        histories = trial_histories(SweepFolder(root))
        assert len(histories) == 2 and all(len(rows) == 2 for rows in histories.values())
        assert _agree(root)
        client, state = _mlflow(root)
        for run in client.search_runs([state["experiment_id"]], "tags.tuner.kind = 'trial'"):
            assert run.info.status == "FINISHED"
            for metric in ("train_loss", "val_loss", "val_accuracy", "lr"):
                assert [m.step for m in client.get_metric_history(run.info.run_id, metric)] == [1, 2]


# --- faults of the machine -----------------------------------------------------------------------
def test_a_full_disk_stops_the_sweep_in_one_line_and_resume_finishes_it(tmp_path, tmpfs, ray_tmp):
    # 3 MiB for the sweep folder of one trial: its first checkpoint (2.4 MB with Adam's
    # state) fits, the second does not, and Tune's own state file is cut short on the way.
    small_disk = tmpfs("3m")
    sweep_file = _sweep_file(
        tmp_path,
        output_dir=str(small_disk / "runs"),
        space={"params": {"lr": {"grid": [3e-3]}}},
        tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}},
    )
    root = small_disk / "runs" / "it"
    env = {"RAY_TMPDIR": str(ray_tmp)}
    line = _ends_in_one_line_error(tuner_cli("sweep", str(sweep_file), env=env))
    assert "No space left on device" in line and f"{tuner_command()} resume {root}" in line, line
    recorded = trial_histories(SweepFolder(root))  # what was recorded is whole
    assert [[row["epoch"] for row in rows] for rows in recorded.values()] == [[1]], recorded

    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)  # space is back
    _ok(tuner_cli("resume", str(root), env=env))
    histories = trial_histories(SweepFolder(root))
    assert set(histories) == set(recorded)
    for rows in histories.values():
        assert [row["epoch"] for row in rows] == [1, 2]
    _agree(root)  # (an epoch Tune had not saved is re-run, and replaces the lost one)


def test_resume_retries_an_errored_trial_from_its_checkpoint(tmp_path, ray_tmp):
    sweep_file = _sweep_file(tmp_path, space={"params": {"dropout": {"grid": [0.25]}}})
    root = tmp_path / "runs" / "it"
    env = {"RAY_TMPDIR": str(ray_tmp)}
    # The trial errors at epoch 2 (no retries set); resume retries it.
    _ok(tuner_cli("sweep", str(sweep_file), env=env, fail_once_at=(2, tmp_path / "faults")))
    status = _ok(tuner_cli("status", str(root), timeout=120)).stdout
    assert "errored" in status, status
    ((trial_id, rows),) = trial_histories(SweepFolder(root)).items()
    assert [row["epoch"] for row in rows] == [1]

    _ok(tuner_cli("resume", str(root), env=env))
    ((_, rows),) = trial_histories(SweepFolder(root)).items()
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows[1]["resumed_from"] == trial_id  # from epoch 1's checkpoint, not from scratch
    status = _ok(tuner_cli("status", str(root), timeout=120)).stdout
    assert "1 finished" in status and "errored" not in status, status
    client, state = _mlflow(root)
    (run,) = client.search_runs([state["experiment_id"]], "tags.tuner.kind = 'trial'")
    assert run.data.tags["tuner.status"] == "finished" and run.info.status == "FINISHED"


# --- export --to, and bad inputs through the CLI -------------------------------------------------
def test_export_to_a_folder_as_torchscript_loads_back_and_agrees(finished, tmp_path):
    from tuner.data.datasets import load_test_split
    from tuner.results.export import load_best

    _, root = finished
    target = tmp_path / "exported"
    done = _ok(tuner_cli("export", str(root), "--to", str(target), "--format", "torchscript", timeout=300))
    assert f"to {target}:" in done.stdout
    scripted, plain = load_best(target), load_best(root / "best")
    import torch

    assert isinstance(scripted.model, torch.jit.ScriptModule)
    assert scripted.metrics["trial_id"] == plain.metrics["trial_id"]
    test = load_test_split("mnist", str(data_root()), download=False)
    classes, _ = scripted.predict(test.images[:500])
    assert (classes == plain.predict(test.images[:500])[0]).all()
    assert scripted.metrics["test_accuracy"] == pytest.approx(plain.metrics["test_accuracy"])

    again = _one_line_error(tuner_cli("export", str(root), "--to", str(target), timeout=120))
    assert "add --overwrite" in again
    _ok(tuner_cli("export", str(root), "--to", str(target), "--overwrite", timeout=300))
    assert sorted(p.name for p in target.iterdir()) == ["config.yaml", "metrics.json", "model.pt"]


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _first(root: Path, pattern: str) -> Path:
    return sorted(root.glob(pattern))[0]


def _idx_root(tmp_path: Path) -> Path:
    """A data root whose MNIST test images are cut short (a truncated download)."""
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for file in (data_root() / "MNIST" / "raw").iterdir():
        (raw / file.name).symlink_to(file)
    images = raw / "t10k-images-idx3-ubyte.gz"
    images.unlink()
    images.write_bytes(gzip.compress(gzip.decompress((data_root() / "MNIST/raw" / images.name).read_bytes())[:5000]))
    return tmp_path / "data"


BAD_INPUTS = {
    # name: (how to break a copy of the finished sweep folder, the command, words the line must have)
    "predict_batch_size_0": (None, ["predict", "{root}/best", "--data", "mnist:test", "--batch-size", "0"], "got 0"),
    "export_to_root": (None, ["export", "{root}", "--to", "/"], "--to /: exists and is not a tuner export"),
    "export_to_a_users_folder": (
        lambda root, tmp: (tmp / "mine").mkdir() or (tmp / "mine" / "paper.tex").write_text("mine\n"),
        ["export", "{root}", "--to", "{tmp}/mine"],
        "is not a tuner export",
    ),
    "export_default_without_overwrite": (None, ["export", "{root}"], "add --overwrite"),
    "truncated_history": (
        lambda root, tmp: _truncate(_first(root, "history/*.jsonl"), 0.7),
        ["status", "{root}"],
        "not a JSON record",
    ),
    "corrupt_history_for_best": (
        lambda root, tmp: _first(root, "history/*.jsonl").write_text("garbage\n"),
        ["best", "{root}"],
        ".jsonl:1: not a JSON record",
    ),
    "truncated_checkpoint": (
        lambda root, tmp: [_truncate(p) for p in root.glob("tune/*/checkpoint_*/checkpoint.pt")],
        ["export", "{root}", "--overwrite"],
        "checkpoint.pt: not a readable checkpoint",
    ),
    "malformed_mlflow_json_ui": (
        lambda root, tmp: (root / "mlflow.json").write_text("{not json"),
        ["ui", "{root}"],
        "mlflow.json: not a readable MLflow run map",
    ),
    "malformed_mlflow_json_resume": (
        lambda root, tmp: (root / "mlflow.json").write_text('{"trials": []}'),
        ["resume", "{root}"],
        "mlflow.json: not a readable MLflow run map",
    ),
    "corrupt_experiment_state": (
        lambda root, tmp: [p.write_text("{") for p in root.glob("tune/experiment_state*.json")],
        ["status", "{root}"],
        "Tune's experiment state cannot be read",
    ),
    "corrupt_experiment_state_resume": (  # and no whole copy to put back: Tune would start again from scratch
        lambda root, tmp: [p.write_text("{") for p in root.glob("tune/experiment_state*.json*")],
        ["resume", "{root}"],
        "Tune's experiment state cannot be read",
    ),
    "truncated_history_resume": (
        lambda root, tmp: _truncate(_first(root, "history/*.jsonl"), 0.7),
        ["resume", "{root}"],
        "not a JSON record",
    ),
    "truncated_tune_pickle_resume": (
        lambda root, tmp: _truncate(root / "tune" / "tuner.pkl"),
        ["resume", "{root}"],
        "tuner.pkl: Tune's saved sweep cannot be restored",
    ),
    "corrupt_export_metrics": (
        lambda root, tmp: (root / "best" / "metrics.json").write_text("["),
        ["best", "{root}"],
        "metrics.json: not a readable",
    ),
    "truncated_idx_predict": (
        lambda root, tmp: _idx_root(tmp),
        ["predict", "{root}/best", "--data", "{tmp}/data/MNIST/raw/t10k-images-idx3-ubyte.gz"],
        "t10k-images-idx3-ubyte.gz: a truncated or corrupt IDX file",
    ),
    "not_a_sweep_folder": (None, ["status", "{tmp}"], "is not a sweep folder"),
    "report_not_a_sweep_folder": (None, ["report", "{tmp}"], "is not a sweep folder"),
    "report_out_is_a_file": (
        lambda root, tmp: (tmp / "a_file").write_text("mine"),
        ["report", "{root}", "--out", "{tmp}/a_file"],
        "a_file",
    ),
    "truncated_history_report": (
        lambda root, tmp: _truncate(_first(root, "history/*.jsonl"), 0.7),
        ["report", "{root}"],
        "not a JSON record",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_bad_input_is_one_line_and_exit_2_and_changes_nothing(finished, tmp_path, case):
    _, source = finished
    root = tmp_path / "sweep"
    shutil.copytree(source, root, symlinks=True)
    (root / "lock").unlink(missing_ok=True)
    breaker, command, words = BAD_INPUTS[case]
    if breaker is not None:
        breaker(root, tmp_path)
    before = {str(p): p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
    args = [part.format(root=root, tmp=tmp_path) for part in command]
    line = _one_line_error(tuner_cli(*args, timeout=300, env={"TUNER_DATA_DIR": str(data_root())}))
    assert words in line, line
    after = {str(p): p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
    assert after == before, "a refused command wrote something"


def test_resume_puts_back_a_state_file_cut_short_from_tuners_whole_copy(finished, tmp_path):
    _, source = finished
    root = tmp_path / "sweep"
    shutil.copytree(source, root, symlinks=True)
    (root / "lock").unlink(missing_ok=True)
    states = sorted(root.glob("tune/experiment_state*.json"))
    assert states, "Tune wrote no experiment state"
    assert all(state.with_name(state.name + STATE_COPY_SUFFIX).is_file() for state in states)
    for state in states:
        state.write_text(state.read_text()[:100])

    done = _ok(tuner_cli("resume", str(root), env={"TUNER_DATA_DIR": str(data_root())}))
    assert "put back tuner's last whole copy" in done.stdout
    for state in states:
        assert json.loads(state.read_text())["trial_data"], f"{state} was not put back whole"
    _agree(root)


def test_resuming_a_finished_sweep_changes_nothing_and_registers_nothing_new(finished):
    _, root = finished
    client, _ = _mlflow(root)
    versions_before = sorted(v.version for v in client.search_model_versions("name='mnist_cnn'"))
    histories_before = trial_histories(SweepFolder(root))
    exported_before = json.loads((root / "best" / "metrics.json").read_text())

    done = _ok(tuner_cli("resume", str(root)))
    assert f"best trial {exported_before['trial_id']} at epoch {exported_before['epoch']}" in done.stdout
    assert trial_histories(SweepFolder(root)) == histories_before
    assert sorted(v.version for v in client.search_model_versions("name='mnist_cnn'")) == versions_before
    assert json.loads((root / "best" / "metrics.json").read_text())["trial_id"] == exported_before["trial_id"]
    _agree(root)
