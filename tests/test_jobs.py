"""Sweeps as Ray Jobs on a cluster of our own (``ray start --head``): submit, follow, list,
stop, and a stopped sweep resumed as a job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import (
    assert_no_leaks_on,
    mlflow_children,
    ray_head,
    small_sweep,
    tuner_cli,
)

from tuner.store import SweepPaths, read_timeline, trial_histories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import tempfile

    temp_dir = Path(tempfile.mkdtemp(prefix="trj", dir="/tmp"))  # short: socket paths
    with ray_head(temp_dir, num_cpus=2) as (address, dashboard):
        yield address, dashboard


def _file(tmp_path: Path, name: str, **sections) -> Path:
    sweep = small_sweep(tmp_path, name=name, **sections)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _job_id(stdout: str) -> str:
    first = stdout.splitlines()[0]
    assert first.startswith("submitted job "), stdout
    return first.split()[2]


def test_a_bad_file_is_refused_here_and_nothing_is_submitted(cluster, tmp_path):
    _, dashboard = cluster
    bad = _file(tmp_path, "bad", train={"epochs": 0})
    refused = tuner_cli("submit", str(bad), "--address", dashboard)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "bad.yaml" in line and "train.epochs" in line, line

    relative = _file(tmp_path, "relative", output_dir="runs")
    refused = tuner_cli("submit", str(relative), "--address", dashboard)
    assert refused.returncode == 2
    assert "output_dir" in refused.stderr and "'runs'" in refused.stderr, refused.stderr

    listed = tuner_cli("jobs", "--address", dashboard)
    assert listed.returncode == 0, listed.stderr
    assert "bad" not in listed.stdout and "relative" not in listed.stdout, listed.stdout


def test_a_submitted_sweep_runs_on_the_cluster_and_is_listed(cluster, tmp_path):
    _, dashboard = cluster
    sweep_file = _file(tmp_path, "viajob", train={"epochs": 1}, trials={"num_samples": 2})
    submitted_at = time.time()
    done = tuner_cli("submit", str(sweep_file), "--address", dashboard, "--follow")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED (exit code 0)" in done.stdout
    root = tmp_path / "runs" / "viajob"
    metrics = json.loads((root / "best" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.5
    first_start = min(event["time"] for event in read_timeline(SweepPaths(root)) if event["event"] == "start")
    print(f"submit to first trial: {first_start - submitted_at:.1f} s")

    listed = tuner_cli("jobs", "--address", dashboard)
    row = next(line for line in listed.stdout.splitlines() if _job_id(done.stdout) in line)
    assert "SUCCEEDED" in row and str(root) in row, listed.stdout


def test_a_stopped_job_saves_its_sweep_and_resubmitting_the_folder_finishes_it(cluster, tmp_path):
    address, dashboard = cluster
    epochs = 30
    sweep_file = _file(tmp_path, "stopme", train={"epochs": epochs}, trials={"num_samples": 2})
    submitted = tuner_cli("submit", str(sweep_file), "--address", dashboard)
    assert submitted.returncode == 0, submitted.stderr
    job_id = _job_id(submitted.stdout)
    root = tmp_path / "runs" / "stopme"
    deadline = time.monotonic() + 300
    while sum(len(p.read_text().splitlines()) for p in root.glob("history/*.jsonl")) < 4:
        assert time.monotonic() < deadline, "the job reported no epochs in time"
        time.sleep(0.5)

    stopped = tuner_cli("stop", job_id, "--address", dashboard)
    assert stopped.returncode == 0, stopped.stderr
    assert f"job {job_id}: STOPPED" in stopped.stdout
    status = tuner_cli("status", str(root))
    assert "finished" not in status.stdout and not (root / "best").exists(), status.stdout
    before = {trial: len(rows) for trial, rows in trial_histories(SweepPaths(root)).items()}
    assert all(0 < count < epochs for count in before.values()), before

    resumed = tuner_cli("submit", str(root), "--address", dashboard, "--follow")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "python -m tuner resume" in resumed.stdout.splitlines()[0]
    for trial, rows in trial_histories(SweepPaths(root)).items():
        assert [row["epoch"] for row in rows] == list(range(1, epochs + 1)), trial  # continued, none repeated
    assert sorted(len(steps) for steps in mlflow_children(root).values()) == [epochs, epochs]
    assert (root / "best" / "metrics.json").is_file()
    assert_no_leaks_on(address)


def test_stop_names_an_unknown_job_in_one_line(cluster):
    _, dashboard = cluster
    refused = tuner_cli("stop", "tuner-nope-1", "--address", dashboard)
    assert refused.returncode == 2
    assert "no job 'tuner-nope-1'" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_an_unreachable_dashboard_is_one_line():
    refused = tuner_cli("jobs", "--address", f"http://127.0.0.1:{_closed_port()}")
    assert refused.returncode == 2
    assert "cannot reach the Ray dashboard" in refused.stderr, refused.stderr


def _closed_port() -> int:
    from integration_helpers import free_port

    return free_port()  # bound then released: nothing listens there
