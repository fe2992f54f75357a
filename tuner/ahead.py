"""Imports made on a thread ahead of the code that needs them, while the process waits on
something else (Ray's start, a sweep's first trials)."""

from __future__ import annotations

import contextlib
import importlib
import threading


def import_ahead(*modules: str, name: str = "tuner-import-ahead") -> None:
    """Import ``modules``, in order, on a daemon thread. Only modules that share no circular
    import with what the main thread imports meanwhile (``ray.init`` imports opentelemetry,
    aiohttp, grpc, pydantic and click: a circular import met from two threads at once is an
    error). A failure here is left to the import that needs the module, which says it."""

    def load() -> None:
        for module in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(module)

    threading.Thread(target=load, name=name, daemon=True).start()
