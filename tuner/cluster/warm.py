"""A local Ray kept warm between commands (``tuner ray up``): every ``sweep``, ``resume`` and
``extend`` on this machine then joins it instead of starting and stopping a Ray of its own,
which costs 3-5 s each way (benchmarks/README.md, issue 43). ``tuner ray down`` stops it, and
so does idleness: no command joined for ``idle_stop_s``.

A *keeper* process leads a session of its own and runs ``ray start --head --block`` in its
process group. It writes ``ray.json`` (the address, its pid) once the head answers, counts
the commands joined to it (each holds a file ``leases/PID`` while it runs; a dead pid holds
nothing), and when told to stop, when idle for long enough or when the head dies, removes
``ray.json`` and kills its own group: only the Ray it started, never another Ray on the
machine (``ray stop`` would kill them all). The files live in ``$TUNER_HOME/ray`` (default
``~/.tuner/ray``). Light to import: Ray is not imported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tuner.cluster.connect import answers
from tuner.errors import TunerError
from tuner.trial.command_process import free_port

IDLE_STOP_S = 3600.0  # an hour without a command joined
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
POLL_S = 1.0


@dataclass(frozen=True)
class WarmRay:
    address: str  # the GCS, host:port
    dashboard: str  # http://127.0.0.1:PORT
    keeper: int  # the keeper's pid, which is also its process group's id
    started: float
    idle_stop_s: float
    num_cpus: int | None


def home() -> Path:
    return Path(os.environ.get("TUNER_HOME") or Path.home() / ".tuner") / "ray"


def _state() -> Path:
    return home() / "ray.json"


def _leases() -> Path:
    return home() / "leases"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid
        return False
    return True


def _read() -> WarmRay | None:
    try:
        return WarmRay(**json.loads(_state().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def current() -> WarmRay | None:
    """The warm Ray, if one is up and answering; a stale ``ray.json`` (a keeper killed with
    SIGKILL, a reboot) counts as none."""
    warm = _read()
    if warm is None or not _alive(warm.keeper) or not answers(warm.address):
        return None
    return warm


def joined_commands() -> list[int]:
    """The pids of the commands joined to the warm Ray now."""
    pids = []
    for lease in _leases().glob("*"):
        with contextlib.suppress(ValueError):
            if _alive(int(lease.name)):
                pids.append(int(lease.name))
    return sorted(pids)


@contextlib.contextmanager
def lease() -> Iterator[None]:
    """Held by a command for as long as it uses the warm Ray: the keeper does not stop for
    idleness while one is held."""
    path = _leases() / str(os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def up(num_cpus: int | None = None, idle_stop_s: float = IDLE_STOP_S) -> tuple[WarmRay, bool]:
    """Start the warm Ray unless one is up; (it, whether this call started it)."""
    warm = current()
    if warm is not None:
        return warm, False
    home().mkdir(parents=True, exist_ok=True)
    with _locked():
        warm = current()  # another `tuner ray up` won the race
        if warm is not None:
            return warm, False
        with contextlib.suppress(OSError):
            _state().unlink()  # a stale one, whose keeper is gone
        log = home() / "keeper.log"
        spec = json.dumps({"num_cpus": num_cpus, "idle_stop_s": idle_stop_s})
        with open(log, "ab") as out:
            keeper = subprocess.Popen(
                [sys.executable, "-m", "tuner.cluster.warm", spec],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session and group: out of reach of the terminal's Ctrl-C
                close_fds=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            warm = current()
            if warm is not None and warm.keeper == keeper.pid:
                return warm, True
            if keeper.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise TunerError(f"the warm Ray did not start ({log}): " + " / ".join(tail))
            time.sleep(0.2)
        _kill_group(keeper.pid)
        raise TunerError(f"the warm Ray did not answer within {START_TIMEOUT_S:.0f} s; its log: {log}")


def down() -> WarmRay | None:
    """Stop the warm Ray (only its keeper's process group); what was stopped, or None."""
    warm = _read()
    if warm is None or not _alive(warm.keeper):
        with contextlib.suppress(OSError):
            _state().unlink()
        return None
    os.kill(warm.keeper, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(warm.keeper) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(warm.keeper):
        _kill_group(warm.keeper)
    with contextlib.suppress(OSError):
        _state().unlink()
    return warm


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    import fcntl

    with open(home() / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def keep(num_cpus: int | None, idle_stop_s: float) -> None:
    """The keeper's life (``python -m tuner.cluster.warm SPEC``), in a session of its own."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("told"))
    signal.signal(signal.SIGINT, lambda *_: stop.append("told"))
    port, dashboard_port = free_port(), free_port()
    ray = Path(sys.executable).with_name("ray")
    command = [
        str(ray) if ray.exists() else "ray",
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        # ports of its own, so that it lives beside another Ray on the machine (a sweep's own, a cluster's)
        "--dashboard-agent-listen-port=0",
        "--min-worker-port=0",
        "--max-worker-port=0",
        f"--ray-client-server-port={free_port()}",
        "--disable-usage-stats",
        *([f"--num-cpus={num_cpus}"] if num_cpus else []),
    ]
    # `ray start`, told to stop, first drains its node for up to 30 s (Ray 2.60: for Serve's
    # proxies on a Kubernetes pod); a local Ray stopped by its user has nothing to hand over,
    # and the wait made `tuner ray down` take 15-19 s.
    env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    head = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env)  # in the keeper's group
    address, dashboard = f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard_port}"
    why = "its head did not come up"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (answers(address) and answers(dashboard.removeprefix("http://"))):
            if head.poll() is not None or stop or time.monotonic() > deadline:
                return
            time.sleep(0.2)
        warm = WarmRay(address, dashboard, os.getpid(), time.time(), idle_stop_s, num_cpus)
        from tuner.folder.store import write_atomic

        write_atomic(_state(), json.dumps(asdict(warm)))
        print(f"{time.strftime('%F %T')} warm Ray up at {address} (dashboard {dashboard})", flush=True)
        busy = time.monotonic()
        while True:
            if stop:
                why = "told to stop"
                break
            if head.poll() is not None:
                why = f"its head ended ({head.returncode})"
                break
            if joined_commands():
                busy = time.monotonic()
            elif time.monotonic() - busy >= idle_stop_s:
                why = f"idle for {idle_stop_s:.0f} s"
                break
            time.sleep(POLL_S)
    finally:
        mine = _read()
        if mine is not None and mine.keeper == os.getpid():
            with contextlib.suppress(OSError):
                _state().unlink()
        print(f"{time.strftime('%F %T')} warm Ray stopping: {why}", flush=True)
        if head.poll() is None:
            head.send_signal(signal.SIGTERM)  # `ray start --block` stops the Ray it started
            with contextlib.suppress(subprocess.TimeoutExpired):
                head.wait(timeout=STOP_TIMEOUT_S / 2)
        _forget_address(port)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(0, signal.SIGKILL)  # whatever of it is left in the group, and the keeper last


def _forget_address(port: int) -> None:
    """`ray start` leaves its address in /tmp/ray/ray_current_cluster, where a plain
    ``ray.init()`` anywhere on the machine looks first: gone, it would wait on a dead address
    for ever. Removed when it names this Ray (as `ray stop` does), else left as it is."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    with contextlib.suppress(OSError):
        if path.read_text().strip().endswith(f":{port}"):
            path.unlink()


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    keep(spec["num_cpus"], float(spec["idle_stop_s"]))
