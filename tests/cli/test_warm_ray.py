"""``tuner ray up / status / down``: a local Ray kept warm between commands, as a user keeps
one (a keeper process running ``ray start --head --block`` in a session of its own), a
sweep that joins it instead of starting a Ray, and its end: by command, and by idleness
once no command holds it. Only the keeper's session is stopped, found by its process id."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import session_pids, small_sweep, tuner_cli, venv_env

from tuner.cluster import warm
from tuner.folder.records import read_timeline
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _until(condition, limit_s: float = 60.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _left_its_address(address: str) -> bool:
    """Whether /tmp/ray/ray_current_cluster (where a plain ``ray.init()`` looks first) still
    names the warm Ray's port after it stopped."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    return path.exists() and path.read_text().strip().endswith(":" + address.rpartition(":")[2])


def _state(home: Path) -> dict:
    return json.loads((home / "ray" / "ray.json").read_text())


def test_a_sweep_joins_the_warm_ray_which_stays_up_until_told(tmp_path):
    home = tmp_path / "home"
    env = venv_env(TUNER_HOME=str(home))
    up = tuner_cli("ray", "up", env=env, timeout=180)
    assert up.returncode == 0, up.stderr
    keeper = _state(home)["keeper"]
    try:
        address = _state(home)["address"]
        assert up.stdout.startswith(f"warm Ray started at {address} (dashboard http://127.0.0.1:")
        again = tuner_cli("ray", "up", env=env, timeout=60)  # the second time: the same Ray
        assert again.returncode == 0 and again.stdout.startswith(f"warm Ray already up at {address}")
        assert _state(home)["keeper"] == keeper
        ray_processes = session_pids(keeper)
        assert len(ray_processes) > 3  # the keeper, `ray start`, the GCS, the raylet, the dashboard...

        sweep_file = tmp_path / "warm.yaml"
        sweep_file.write_text(yaml.safe_dump(small_sweep(tmp_path, name="warm", train={"epochs": 1})))
        swept = tuner_cli("sweep", str(sweep_file), env=env, timeout=300)
        assert swept.returncode == 0, swept.stderr[-3000:]
        assert f"  Ray: the warm local Ray at {address} (tuner ray down stops it)" in swept.stdout.splitlines()
        best = json.loads((tmp_path / "runs" / "warm" / "best" / "metrics.json").read_text())
        assert best["test_accuracy"] > 0.5
        # the sweep's record holds it as a local run: `tuner resume` without --address goes on
        runs = [e for e in read_timeline(SweepFolder(tmp_path / "runs" / "warm")) if e.get("event") == "run"]
        assert len(runs) == 1 and "cluster" not in runs[0]

        # the sweep ended and left the warm Ray as it was: up, the same keeper, no command joined
        status = tuner_cli("ray", "status", env=env, timeout=60)
        lines = status.stdout.splitlines()
        assert lines[0].startswith(f"warm Ray at {address} (dashboard ") and lines[1] == "  0 command(s) joined now"
        assert _state(home)["keeper"] == keeper and keeper in session_pids(keeper)
    finally:
        down = tuner_cli("ray", "down", env=env, timeout=120)
    assert down.returncode == 0 and down.stdout.strip() == f"warm Ray at {address} stopped"
    assert _until(lambda: not session_pids(keeper)), session_pids(keeper)
    assert not (home / "ray" / "ray.json").exists() and not _left_its_address(address)
    again = tuner_cli("ray", "down", env=env, timeout=60)  # the second time: nothing to stop, exit 0
    assert again.returncode == 0 and again.stdout.strip() == "no warm Ray is up"


def test_the_warm_ray_stops_when_idle_but_not_while_a_command_holds_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    env = venv_env(TUNER_HOME=str(home))
    monkeypatch.setenv("TUNER_HOME", str(home))
    with warm.lease():  # a command joined before it started: it may not stop for idleness
        up = tuner_cli("ray", "up", "--idle-stop", "0.05", env=env, timeout=180)  # 3 s
        assert up.returncode == 0, up.stderr
        keeper, address = _state(home)["keeper"], _state(home)["address"]
        try:
            time.sleep(8)
            assert warm.current() is not None and warm.current().keeper == keeper
            assert warm.joined_commands() == [os.getpid()]
            status = tuner_cli("ray", "status", env=env, timeout=60)
            assert "  1 command(s) joined now (pids " in status.stdout
        except BaseException:
            tuner_cli("ray", "down", env=env, timeout=120)
            raise
    # released: idle from now on, it stops itself and only itself
    assert _until(lambda: not session_pids(keeper), 90), session_pids(keeper)
    assert warm.current() is None and not (home / "ray" / "ray.json").exists()
    assert not _left_its_address(address)
    assert "warm Ray stopping: idle for 3 s" in (home / "ray" / "keeper.log").read_text()


def test_a_state_file_whose_keeper_is_gone_is_no_warm_ray(tmp_path, monkeypatch):
    """A keeper killed with SIGKILL, or a reboot, leaves ray.json behind: not a Ray to join."""
    monkeypatch.setenv("TUNER_HOME", str(tmp_path))
    (tmp_path / "ray").mkdir()
    dead = 2**22 + 7  # above the kernel's default pid_max: never a live process
    (tmp_path / "ray" / "ray.json").write_text(
        json.dumps(
            {
                "address": "127.0.0.1:1",
                "dashboard": "http://127.0.0.1:2",
                "keeper": dead,
                "started": 0.0,
                "idle_stop_s": 60.0,
                "num_cpus": None,
            }
        )
    )
    assert warm.current() is None
    status = tuner_cli("ray", "status", env={"TUNER_HOME": str(tmp_path)}, timeout=60)
    assert status.returncode == 0 and status.stdout.startswith("no warm Ray is up")
    assert warm.down() is None and not (tmp_path / "ray" / "ray.json").exists()
