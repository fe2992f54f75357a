"""The cores of this machine that sweeps hold or lend, across every sweep running on it.

Each sweep's local Ray counts the machine's cores as its own, so two sweeps at once on one
machine each saw the other's cores as spare and lent them to their last trials: four
threads on two cores. A sweep that lends cores (tuner.driver.callbacks.SpareCores) now
writes what it holds and lends to a small ledger of the machine's (a file per sweep
driver, under a lock), and lends only what no other live sweep holds or lends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def ledger_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"tuner-cores-{os.getuid()}"


def machine_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def ledger(folder: Path | None = None) -> Iterator[Path]:
    """The ledger's folder, locked against other sweeps for as long as the caller reads and writes."""
    folder = folder or ledger_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def others_use(folder: Path, me: int) -> int:
    """Cores the other live sweeps hold or lend (a dead driver's entry is removed)."""
    used = 0
    for entry in folder.glob("*.json"):
        pid = int(entry.stem) if entry.stem.isdigit() else 0
        if pid == me:
            continue
        if not _alive(pid):
            entry.unlink(missing_ok=True)
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):
            note = json.loads(entry.read_text())
            used += int(note.get("held", 0)) + int(note.get("lent", 0))
    return used


def record(folder: Path, me: int, held: int, lent: int) -> None:
    """This sweep's entry: what it holds and lends now (none: no entry)."""
    entry = folder / f"{me}.json"
    if held <= 0 and lent <= 0:
        entry.unlink(missing_ok=True)
        return
    part = entry.with_suffix(".part")
    part.write_text(json.dumps({"held": held, "lent": lent}))
    part.replace(entry)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True
