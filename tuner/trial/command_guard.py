"""Beside a user's command (tuner/trial/command_process.py), a process that ends the command's whole
process group when the trial's process dies without stopping it: a Ray Train worker is
killed, not asked, when Tune stops its trial or a rank fails, and the command's own
children (a DataLoader's workers, a shell's programs) would outlive it.

    python command_guard.py <process group> <grace seconds>

Started with ``PR_SET_PDEATHSIG=SIGTERM``, so the trial process's death reaches it as SIGTERM;
then it sends the group SIGTERM, and SIGKILL after the grace. It exits by itself once the
group is gone. Run by its path, not as ``tuner.trial.command_guard``: it imports nothing of
tuner's (nor torch), so that it starts in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

POLL_S = 1.0


def alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user's took the id: not ours any more
        return False
    return True


def end(group: int, grace_s: float) -> None:
    """SIGTERM to the group, SIGKILL to whatever is left of it after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def main() -> None:
    group, grace_s = int(sys.argv[1]), float(sys.argv[2])

    def parent_died(signum: int, frame: object) -> None:
        end(group, grace_s)
        os._exit(0)

    signal.signal(signal.SIGTERM, parent_died)
    while alive(group):
        time.sleep(POLL_S)


if __name__ == "__main__":
    main()
