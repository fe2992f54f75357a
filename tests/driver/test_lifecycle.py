"""Failure paths with real processes and real signals: a retried trial, a SIGKILLed
sweep resumed to the end, and Ctrl-C stopping cleanly with a way to resume."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from integration_helpers import (
    kill_ray_under,
    mlflow_children,
    small_sweep,
    start_sweep,
    tuner_cli,
    wait_for_results,
)

from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder
from tuner.invocation import tuner_command
from tuner.results.summaries import all_results, open_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


# The direct runner's retry. A TorchTrainer's retry from its checkpoint after a raise runs in
# tests/data/test_own_data.py (two DDP workers, failed once at epoch 2); its resume after a
# kill, below.
def test_a_trial_that_raises_resumes_from_its_checkpoint(tmp_path, ray_tmp):
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 3},
        trials={"num_samples": 1, "max_failures": 1},
        scaling={"runner": "direct"},
    )
    sweep_file = tmp_path / "retry.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    faults = tmp_path / "faults"
    process = start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)}, fail_once_at=(2, faults))
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]

    root = tmp_path / "runs" / "it"
    ((trial_id, rows),) = trial_histories(SweepFolder(root)).items()
    assert list(faults.glob(f"{trial_id}.failed-once")), "the injected fault did not fire"
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # not restarted from epoch 1
    assert rows[1]["resumed_from"] == trial_id  # epoch 2 ran again from epoch 1's checkpoint
    assert rows[0]["resumed_from"] == ""
    assert mlflow_children(root) == {trial_id: [1, 2, 3]}

    # The trial kept its checkpoints in its own folder, and Tune was told of none (no `save`
    # round trip after each report): the retry found epoch 1's there, and the export the best.
    sweep_config, folder = open_sweep(str(root))
    (result,) = all_results(sweep_config, folder)
    assert result.best_checkpoints == []
    assert [r["checkpoint_dir_name"] for r in rows] == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    exported = json.loads((root / "best" / "metrics.json").read_text())
    best_row = max(rows, key=lambda r: r["val_accuracy"])
    assert exported["checkpoint"] == str(Path(result.path) / best_row["checkpoint_dir_name"])
    assert exported["epoch"] == best_row["epoch"]


def test_a_killed_sweep_resumes_to_the_true_best(tmp_path, ray_tmp, runner):
    # Direct: a third trial waits for a slot. A TorchTrainer's start-up is 8-10 s a trial, so
    # its variant runs two, killed halfway: the resume of a Train run is what it adds.
    grid = [3e-3, 1e-5, 2e-3] if runner == "direct" else [3e-3, 1e-5]
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 2},
        scaling={"runner": runner},
        space={"params": {"lr": {"grid": grid}}},
        trials={"num_samples": 1},
    )
    sweep_file = tmp_path / "killed.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    first_place = tmp_path / "runs" / "it"
    process = start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)})
    try:
        wait_for_results(first_place, 3 if runner == "direct" else 2, process)  # epochs of 6 or 4
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        kill_ray_under(ray_tmp)  # what the kill orphaned: raylet, GCS, dashboard
    assert not (first_place / "best").exists()

    # The user moves the folder before resuming: every record follows it.
    root = tmp_path / "moved" / "it"
    root.parent.mkdir()
    first_place.rename(root)
    resumed = tuner_cli("resume", str(root), env={"RAY_TMPDIR": str(ray_tmp)})
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    assert not first_place.exists(), "the resumed sweep wrote to where the folder was before"
    results = trial_histories(SweepFolder(root))
    assert len(results) == len(grid)
    for rows in results.values():  # every trial ran to the end across both halves, no epoch twice
        assert [row["epoch"] for row in rows] == [1, 2]
    mlflow_steps = mlflow_children(root)
    assert set(mlflow_steps) == set(results)
    for steps in mlflow_steps.values():
        assert steps == sorted(set(steps)) and steps[-1] == 2  # monotone, no duplicate epochs

    best_value = max(row["val_accuracy"] for rows in results.values() for row in rows)
    exported = json.loads((root / "best" / "metrics.json").read_text())
    assert exported["val_accuracy"] == pytest.approx(best_value)

    status = tuner_cli("status", str(root), timeout=120)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("finished") >= 1 and "interrupted" not in status.stdout
    best = tuner_cli("best", str(root), timeout=120)
    assert best.returncode == 0 and f"best trial {exported['trial_id']}" in best.stdout


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path, ray_tmp):
    sweep = small_sweep(
        tmp_path,
        data={"train_subset": 1500},
        train={"epochs": 60},  # still running, on a loaded machine, after status and report have read it
        space={"params": {"lr": {"grid": [3e-3, 2e-3, 1e-3]}}},
        trials={"num_samples": 1},
    )
    sweep_file = tmp_path / "interrupted.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    root = tmp_path / "runs" / "it"
    process = start_sweep(sweep_file, env={"RAY_TMPDIR": str(ray_tmp)})
    wait_for_results(root, 1, process)
    # While it runs, status and the report read the folder and say which trial is running.
    running = tuner_cli("status", str(root), timeout=120)
    assert running.returncode == 0 and process.poll() is None, running.stderr
    assert re.search(r"^\S+ +running ", running.stdout, re.M), running.stdout
    _reports_unfinished(root, "running")
    os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    assert "GCS" not in stdout + stderr and "rpc_client" not in stdout + stderr
    assert f"{tuner_command()} resume {root}" in stderr
    assert "Tuner.restore" not in stdout + stderr  # Tune's advice, not tuner's
    (summary,) = re.findall(r"^\[ *\S+\] it \d/3 done.*$", stdout, re.M)  # the progress's last line
    assert "interrupted" in summary and "stopped early" not in summary, summary
    assert not (root / "best").exists()
    _reports_unfinished(root, "interrupted")
    status = tuner_cli("status", str(root), timeout=120)
    assert status.returncode == 0, status.stderr
    summary = status.stdout.splitlines()[-2]  # e.g. "  1 interrupted, 2 pending"
    assert summary.strip() and summary.strip() != "3 finished", status.stdout
    from ray import tune

    assert tune.Tuner.can_restore(str(root / "tune"))


def _reports_unfinished(root, trial_state: str) -> None:
    """``tuner report`` on a folder whose sweep has not finished: a page that says so,
    with the trial that did not end drawn open-ended."""
    shown = tuner_cli("report", str(root), "--out", str(root.parent / f"report-{trial_state}"), timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    page = (root.parent / f"report-{trial_state}" / "report.html").read_text()
    assert "not finished (running, or interrupted" in page
    ended = re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td>", page)  # each trial's "ended" cell
    assert trial_state in ended, ended
    assert (root.parent / f"report-{trial_state}" / "timeline.png").is_file()
