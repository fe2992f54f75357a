"""A sweep joins a separately started Ray cluster with --address, as users scale out."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from integration_helpers import data_root, small_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path, ray_tmp):
    """A head node of our own (its own temp dir), stopped by that dir: never another Ray."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    port = _free_port()
    env = {**os.environ, "RAY_ADDRESS": ""}
    subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            "--disable-usage-stats",
            f"--temp-dir={ray_tmp}",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    yield f"127.0.0.1:{port}"  # ray_tmp's teardown stops every process under its temp dir


def test_sweep_runs_on_an_existing_cluster_by_address(ray_cluster, tmp_path):
    sweep = small_sweep(tmp_path, train={"epochs": 1}, trials={"num_samples": 2})
    sweep_file = tmp_path / "cluster.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "sweep", str(sweep_file), "--address", ray_cluster],
        capture_output=True,
        text=True,
        timeout=800,
        env={**os.environ, "TUNER_DATA_DIR": str(data_root())},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "best trial" in done.stdout
    metrics = json.loads((tmp_path / "runs" / "it" / "best" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.5
    # The sweep's driver is recorded by that cluster (it did not start a Ray of its own).
    probe = (
        "import ray\n"
        f"ray.init(address={ray_cluster!r}, log_to_driver=False)\n"
        "from ray.util.state import list_jobs\n"
        "print(sum(1 for job in list_jobs() if str(job.type).endswith('DRIVER')))\n"
    )
    jobs = subprocess.run(  # a plain client sends the cluster's token only in token mode
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "RAY_AUTH_MODE": "token"},
    )
    assert jobs.returncode == 0, jobs.stderr[-2000:]
    assert int(jobs.stdout.strip().splitlines()[-1]) >= 2  # the sweep's driver and this probe
