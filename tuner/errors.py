"""The one error type users see: a message that names file, line, field and value."""

from __future__ import annotations


class TunerError(ValueError):
    """A user error: bad sweep file, missing data set, not a model folder.

    The CLI prints ``str(error)`` as one line and exits 2; no traceback unless
    ``--debug``.
    """


class NoFeasibleTrial(TunerError):
    """Trials reported the sweep's metric, but none meets its ``constraints``: no best, nothing exported."""


class ConfigError(TunerError):
    """A sweep or search-space file that does not validate."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.file = file
        self.line = line
        self.reason = message
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        super().__init__(where + message)
