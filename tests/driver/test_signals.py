"""SIGTERM or SIGINT to a sweep's whole process group (what Slurm's ``scancel``, a pod's
stop, ``timeout`` and a terminal's Ctrl-C send): the sweep ends within 30 s with its state
saved and one line saying how to resume, no Ray error line, none of its Ray processes left;
``resume`` then finishes it. Run as a user runs it: ``python -m tuner`` in a process group
of its own, a local Ray of its own."""

from __future__ import annotations

import os
import re
import signal
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from integration_helpers import data_root, start_sweep, tuner_cli, users_sweep, wait_for_results

from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SLOW = textwrap.dedent(
    """
    import time


    def train(params, context):
        for epoch in range(context.start_epoch, context.max_epochs):
            time.sleep(1.0)
            folder = context.trial_dir / "state"
            folder.mkdir(exist_ok=True)
            (folder / "epoch").write_text(str(epoch + 1))
            context.report({"score": params["x"] * (epoch + 1)}, checkpoint=folder)
    """
)


def _sweep(tmp_path: Path) -> Path:
    return users_sweep(
        tmp_path,
        {"slow.py": SLOW},
        {
            "name": "slow",
            "trainable": "slow:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 4},
            "space": {"params": {"x": {"uniform": [0.1, 1.0]}}},
            "scheduler": {"name": "fifo"},
            "trials": {"num_samples": 3},
        },
    )


def _ray_processes_under(folder: Path) -> list[str]:
    """The processes of the sweep's own Ray: their command lines, environment or open log
    files name its temp folder (Ray's agents retitle themselves: ``ray::DashboardAgent``)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        line = " ".join(process.info["cmdline"] or [])
        if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        try:
            ours = (
                str(folder) in line
                or process.environ().get("RAY_TMPDIR") == str(folder)
                or any(str(folder) in opened.path for opened in process.open_files())  # its logs
            )
        except psutil.Error:  # gone meanwhile
            continue
        if ours:
            found.append(line.strip()[:150])
    return found


def test_sigterm_to_the_whole_group_ends_the_sweep_in_seconds_and_resume_finishes_it(tmp_path, ray_tmp):
    """(SIGINT to the whole group, a terminal's Ctrl-C: test_lifecycle's Ctrl-C test.)"""
    signum = signal.SIGTERM
    env = {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}
    process = start_sweep(_sweep(tmp_path), env=env)
    root = tmp_path / "runs" / "slow"
    wait_for_results(root, 3, process, timeout_s=300)
    sent = time.monotonic()
    os.killpg(process.pid, signum)  # every process of the group, as the batch scheduler does
    stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - sent
    console = stdout + stderr
    assert took < 30, f"{took:.0f} s: {console[-3000:]}"
    assert process.returncode == 130, console[-3000:]
    assert "saving the sweep's state" in console
    assert re.search(rf"continue it with: \S+ -m tuner resume {re.escape(str(root))}|tuner resume {root}", stderr)
    for noise in ("GCS", "rpc_client", "Traceback", "Tuner.restore"):
        assert noise not in console, console[-3000:]
    time.sleep(2)
    assert not _ray_processes_under(ray_tmp), _ray_processes_under(ray_tmp)

    resumed = tuner_cli("resume", str(root), env=env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    histories = trial_histories(SweepFolder(root))
    assert len(histories) == 3
    assert all([row["epoch"] for row in rows] == [1, 2, 3, 4] for rows in histories.values()), histories
    assert (root / "best" / "metrics.json").is_file()
    # A sweep that runs to its end stops its Ray quietly, and all of it.
    for noise in ("GCS", "rpc_client", "Traceback", "Exception"):
        assert noise not in resumed.stdout + resumed.stderr, (resumed.stdout + resumed.stderr)[-3000:]
    deadline = time.monotonic() + 10
    while _ray_processes_under(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_processes_under(ray_tmp), _ray_processes_under(ray_tmp)


def test_a_driver_killed_alone_leaves_none_of_its_rays_processes(tmp_path, ray_tmp):
    """SIGKILL to the driver only (the OOM killer, kill -9): Ray's processes are out of its
    group now, so the keeper of their group ends them (Ray's agents outlived a killed
    driver before); resume is test_lifecycle's."""
    env = {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}
    process = start_sweep(_sweep(tmp_path), env=env)
    wait_for_results(tmp_path / "runs" / "slow", 2, process, timeout_s=300)
    assert _ray_processes_under(ray_tmp)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    deadline = time.monotonic() + 15
    while _ray_processes_under(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_processes_under(ray_tmp), _ray_processes_under(ray_tmp)
