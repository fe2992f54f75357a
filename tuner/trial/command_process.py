"""A user's command as a process (tuner/trial/command.py starts one per trial, or one per
Ray Train worker, tuner/trial/command_ddp.py): its process group and guard, its output
copied to the trial's log line by line, its stop, and torchrun's environment for it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

GRACE_S = 10.0  # between a stop's SIGTERM and its SIGKILL
GUARD = Path(__file__).with_name("command_guard.py")


def torch_env(
    *, rank: int, world: int, local_rank: int, local_world: int, node_rank: int, address: str, port: int
) -> dict[str, str]:
    """torch.distributed's ``env://`` variables, as torchrun sets them for each process."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank),
        "MASTER_ADDR": address,
        "MASTER_PORT": str(port),
    }


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen]:
    """The command, in a process group of its own with a guard beside it; stopped on the way out."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order it was printed
        start_new_session=True,  # its own process group: a stop reaches its children too
        preexec_fn=die_with_parent,
    )
    guard = subprocess.Popen(
        [sys.executable, "-S", str(GUARD), str(process.pid), str(GRACE_S)],
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        yield process
    finally:
        stop(process)
        guard.kill()  # SIGKILL: the group is gone, nothing for its SIGTERM handler to do
        guard.wait()


def pump(process: subprocess.Popen, log: IO[bytes], on_line: Callable[[str], None] | None) -> str:
    """Copy the command's output to ``log`` as it comes, each line to ``on_line``; its last line
    (a traceback's ends with the error)."""
    last = ""
    for raw in process.stdout:
        log.write(raw)
        log.flush()
        text = raw.decode(errors="replace")
        last = text.strip()[:300] or last
        if on_line is not None:
            on_line(text)
    return last


def shown(log: Path) -> str:
    """Where the log is: in the sweep folder once the trial's folder is there (Tune copies it),
    or in a folder of the trial's own on a worker's node (a Ray Train worker's, tuner/trial/own.py)."""
    if log.parent.parent.name == "tuner-trials":
        return f"its output: {log} on the worker's node"
    return f"its output: tune/{log.parent.name}/{log.name} in the sweep folder"


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, SIGKILL after ``GRACE_S``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def die_with_parent() -> None:
    """In the child: SIGTERM when the trial's process dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
