"""Who holds a sweep folder: the note a lock carries (a local ``flock`` file or a storage
URI's lock object), and the one way the next process names that holder."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any


def holder_note() -> dict[str, Any]:
    """This process, as the holder of a sweep folder's lock."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(["python -m tuner", *sys.argv[1:]]) if sys.argv else "tuner",
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def in_use_message(where: str, holder: dict[str, Any] | None) -> str:
    """The one line that refuses a folder another process holds."""
    try:
        who = f"process {holder['pid']} on {holder['host']} ({holder['command']}, since {holder['since']})"
    except (KeyError, TypeError):
        who = "another process"
    return f"{where} is in use by {who}; wait for it to end, or stop it"
