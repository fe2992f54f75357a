"""Imports made on a thread ahead of the code that needs them, while the process waits on
something else (Ray's start, a sweep's first trials)."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading

# The niceness of a thread that runs lowly: at 10, a CPU-bound task of the default priority
# gets about 10 times its CPU, so it still ends on a machine that stays busy (a sweep's
# trials) rather than waiting for an idle CPU (19) that may not come.
LOW_PRIORITY = 10


def import_ahead(*modules: str, name: str = "tuner-import-ahead", lowly: bool = False) -> threading.Thread:
    """Import ``modules``, in order, on a daemon thread. Only modules that share no circular
    import with what the main thread imports meanwhile (``ray.init`` imports opentelemetry,
    aiohttp, grpc, pydantic and click: a circular import met from two threads at once is an
    error). A failure here is left to the import that needs the module, which says it.

    ``lowly``: the thread runs at a low CPU priority (``run_lowly``), taking on a busy
    machine only the CPU that the work it overlaps leaves idle. Only where no other thread
    of the process must run meanwhile: a thread that holds the GIL while the kernel keeps it
    waiting keeps the others waiting too."""

    def load() -> None:
        if lowly:
            run_lowly()
        for module in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(module)

    thread = threading.Thread(target=load, name=name, daemon=True)
    thread.start()
    return thread


def run_lowly() -> None:
    """The calling thread (only it, not its process) at nice ``LOW_PRIORITY``: it runs mostly
    when a CPU would otherwise idle. Ray's local start on 2 cores took 5.8-6.9 s alone,
    7.3-7.6 s beside the MLflow writer's imports at the default priority and 5.8-6.6 s beside
    them at nice 10 (benchmarks/README.md). A thread cannot be given its priority back without
    privileges, so only threads that end soon call this."""
    with contextlib.suppress(OSError, AttributeError):  # (not Linux: the thread stays as it is)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOW_PRIORITY)
