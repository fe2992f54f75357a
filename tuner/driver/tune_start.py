"""A sweep's Tune experiment begins in a second of its own on its Ray node.

Ray Train stages a Tune experiment's driver files (its state, the trials' logs) in
``<Ray session>/artifacts/<the second the experiment was made>/<experiment name>/`` and
uploads that folder whole into the experiment's storage. Every sweep names its experiment
``tune``, so two sweeps that begin in the same second on one Ray (a warm Ray, a cluster's
head) would share the folder, and each would upload both sweeps' state and trials into its
own ``tune/``. So a sweep holds a lock in the Ray session's folder from just before
``Tuner.fit`` until Tune has made its experiment (its callbacks' ``setup``), and begins in
a later second than the last sweep that held it: at most a second's wait, and only when
another sweep began just before.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

LOCK_NAME = "tuner-tune-start.lock"  # holds the second (Unix time) the last sweep's experiment was made by

_held: IO[str] | None = None


def ray_session_dir() -> Path | None:
    """The connected Ray's session folder on this node (None: a Ray Client, which has none here)."""
    from ray._private import worker

    node = worker._global_node
    return Path(node.get_session_dir_path()) if node is not None else None


@contextlib.contextmanager
def a_second_of_its_own(session_dir: Path | None) -> Iterator[None]:
    """Hold the node's start lock around ``Tuner.fit`` until :func:`begun` (or the block's end)."""
    global _held
    try:
        # (held past this function, closed by begun())
        handle = open(session_dir / LOCK_NAME, "a+") if session_dir is not None else None  # noqa: SIM115
    except OSError:  # a session folder this user cannot write to: Ray's own staging would say so
        handle = None
    if handle is None:
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        last = handle.read().strip()
        # Only a sweep begun in this very second is waited for: a stamp ahead of the clock
        # (the clock set back since) names a second this sweep's experiment cannot have.
        if last.isdigit() and int(last) <= (now := time.time()) < int(last) + 1:
            time.sleep(int(last) + 1 - now)
    except BaseException:
        handle.close()
        raise
    _held = handle
    try:
        yield
    finally:
        begun()


def begun() -> None:
    """Tune has made its experiment (and its staging folder's name): the next sweep may begin,
    in a later second. Does nothing where no lock is held."""
    global _held
    handle, _held = _held, None
    if handle is None:
        return
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(int(time.time())))
        handle.flush()
    finally:
        handle.close()  # closing releases the lock
