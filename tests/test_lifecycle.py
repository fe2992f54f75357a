"""Failure paths with real processes and real signals: a retried trial, a SIGKILLed
sweep resumed to the end, and Ctrl-C stopping cleanly with a way to resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import small_sweep

from tuner.store import SweepPaths, trial_histories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def _tuner(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _start_sweep(sweep_file: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "sweep", str(sweep_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the kill takes Ray's processes with it
        env={**os.environ, **(env or {})},
    )


def _wait_for_results(sweep_root: Path, count: int, process: subprocess.Popen, timeout_s: float = 600) -> None:
    """Until ``count`` epochs in all have been reported (the sweep's history log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = sum(len(p.read_text().splitlines()) for p in sweep_root.glob("history/*.jsonl"))
        if lines >= count:
            return
        if process.poll() is not None:
            raise AssertionError(f"the sweep ended early: {process.communicate()}")
        time.sleep(0.5)
    raise AssertionError("no result in time")


@pytest.fixture
def ray_tmp():
    """A Ray temp dir of the test's own, so the processes a SIGKILL orphans can be found
    by it and stopped without touching any other Ray on the machine (short: socket paths)."""
    folder = Path(tempfile.mkdtemp(prefix="tr", dir="/tmp"))
    yield folder
    _kill_ray_under(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _kill_ray_under(folder: Path) -> None:
    subprocess.run(["pkill", "-9", "-f", str(folder)], capture_output=True, timeout=60)


def _mlflow_children(sweep_root: Path) -> dict[str, list[int]]:
    from mlflow.tracking import MlflowClient

    state = json.loads((sweep_root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], "tags.tuner.kind = 'trial'")
    steps = {}
    for run in runs:
        trial_id = run.data.tags["tuner.trial_id"]
        assert trial_id not in steps, f"two MLflow runs for trial {trial_id}"
        assert run.data.tags["mlflow.parentRunId"] == state["parent_run_id"]
        steps[trial_id] = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
    return steps


def test_a_trial_that_raises_resumes_from_its_checkpoint(tmp_path, ray_tmp, runner):
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 3},
        trials={"num_samples": 1, "max_failures": 1},
        scaling={"runner": runner},
    )
    sweep_file = tmp_path / "retry.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    process = _start_sweep(sweep_file, env={"TUNER_TEST_FAIL_AT_EPOCH": "2", "RAY_TMPDIR": str(ray_tmp)})
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]

    root = tmp_path / "runs" / "it"
    ((trial_id, rows),) = trial_histories(SweepPaths(root)).items()
    assert list((root / "train").glob("*.failed-once")), "the injected fault did not fire"
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # not restarted from epoch 1
    assert rows[1]["resumed_from"] == trial_id  # epoch 2 ran again from epoch 1's checkpoint
    assert rows[0]["resumed_from"] == ""
    assert _mlflow_children(root) == {trial_id: [1, 2, 3]}


def test_a_killed_sweep_resumes_to_the_true_best(tmp_path, ray_tmp, runner):
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 2},
        scaling={"runner": runner},
        space={"params": {"lr": {"grid": [3e-3, 1e-5, 2e-3, 1e-4]}}},
        trials={"num_samples": 1},
    )
    sweep_file = tmp_path / "killed.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    root = tmp_path / "runs" / "it"
    process = _start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)})
    try:
        _wait_for_results(root, 3, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        _kill_ray_under(ray_tmp)  # what the kill orphaned: raylet, GCS, dashboard
    assert not (root / "best").exists()

    resumed = _tuner("resume", str(root), env={"RAY_TMPDIR": str(ray_tmp)})
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    results = trial_histories(SweepPaths(root))
    assert len(results) == 4
    for rows in results.values():  # every trial ran to the end across both halves, no epoch twice
        assert [row["epoch"] for row in rows] == [1, 2]
    mlflow_steps = _mlflow_children(root)
    assert set(mlflow_steps) == set(results)
    for steps in mlflow_steps.values():
        assert steps == sorted(set(steps)) and steps[-1] == 2  # monotone, no duplicate epochs

    best_value = max(row["val_accuracy"] for rows in results.values() for row in rows)
    exported = json.loads((root / "best" / "metrics.json").read_text())
    assert exported["val_accuracy"] == pytest.approx(best_value)

    status = _tuner("status", str(root), timeout=120)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("finished") >= 1 and "interrupted" not in status.stdout
    best = _tuner("best", str(root), timeout=120)
    assert best.returncode == 0 and f"best trial {exported['trial_id']}" in best.stdout


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path, ray_tmp):
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 3},
        space={"params": {"lr": {"grid": [3e-3, 2e-3, 1e-3]}}},
        trials={"num_samples": 1},
    )
    sweep_file = tmp_path / "interrupted.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    root = tmp_path / "runs" / "it"
    process = _start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)})
    _wait_for_results(root, 1, process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    assert f"python -m tuner resume {root}" in stderr
    assert not (root / "best").exists()
    status = _tuner("status", str(root), timeout=120)
    assert status.returncode == 0, status.stderr
    summary = status.stdout.splitlines()[-2]  # e.g. "  1 interrupted, 2 pending"
    assert summary.strip() and summary.strip() != "3 finished", status.stdout
    from ray import tune

    assert tune.Tuner.can_restore(str(root / "tune"))
