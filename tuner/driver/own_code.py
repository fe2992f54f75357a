"""The user's code a sweep runs: taken from its folder when the sweep starts, kept in the
sweep folder (``code/``), and read back from there when the sweep resumes, so that every
trial of a sweep, first run or resumed, runs the same code (tuner/usercode/snapshot.py)."""

from __future__ import annotations

import re
from typing import Any

from tuner.errors import TunerError
from tuner.folder.store import SweepFolder
from tuner.sweepfile import own_code as spec
from tuner.sweepfile.schema import SweepConfig
from tuner.usercode import snapshot


def take(sweep: SweepConfig) -> Any:
    """The code folder's snapshot, or None when the sweep names no code of the user's."""
    if not spec.uses_own_code(sweep):
        return None
    return snapshot.take(sweep.code_dir)


def keep(code: Any, folder: SweepFolder) -> None:
    if code is not None:
        snapshot.write_files(code.files, folder.code)


def kept(sweep: SweepConfig, folder: SweepFolder) -> Any:
    """The snapshot a sweep began with (its ``code/``), else its code folder's as it is now."""
    if not spec.uses_own_code(sweep):
        return None
    if folder.code.is_dir():
        return snapshot.read(folder.code)
    return snapshot.take(sweep.code_dir)


NOTEBOOK = "__main__"  # the module of a function defined in a notebook or a script run as such


def check_importable(sweep: SweepConfig) -> None:
    """Refuse a sweep whose trainable or objective was a notebook's function given to
    ``tuner.run`` (sweep.yaml names it ``__main__:name``), run again without it: only the
    notebook has it, and every trial would fail to import it."""
    for field in ("trainable", "objective"):
        reference = getattr(sweep, field)
        if reference is not None and reference.split(":")[0] == NOTEBOOK:
            raise TunerError(
                f"{field}: {reference!r} was a function of a notebook (or script) given to tuner.run; run it "
                f"from there again: tuner.resume(folder, {field}={reference.split(':')[1].split('.')[-1]})"
            )


def reference(function: Any) -> str:
    """How the sweep file names a function given as an object: ``module:name``."""
    module = getattr(function, "__module__", None) or NOTEBOOK
    name = re.sub(r"\W", "_", getattr(function, "__qualname__", "").split(".<locals>.")[-1]) or "function"
    return re.sub(r"[^\w.]", "_", module) + ":" + name
