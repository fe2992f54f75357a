"""A line among a sweep's own, from any layer: through the sweep's reporter (above rich's
live view on a terminal; stamped like its other lines elsewhere) while one shows progress in
this context, else printed.

The reporter lives in ``tuner.driver.progress``, above everything that has a line to say
while a sweep runs (``tuner.tracking``'s MLflow writer says when its server goes away and
when it is back); it sets its ``say`` in ``SAYING`` while it shows. A context, not module
state: the MLflow writer runs each write in a copy of the context of the Tune callback that
queued it, so it finds the reporter of the sweep it writes for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar

SAYING: ContextVar[Callable[[str], None] | None] = ContextVar("tuner_say", default=None)


def say(line: str) -> None:
    """``line`` through the reporter of this context, else on stdout; a reader gone away
    (``| head``) is not the sweep's concern."""
    if (reporter_say := SAYING.get()) is not None:
        reporter_say(line)
        return
    with contextlib.suppress(OSError, ValueError):
        print(line, flush=True)
