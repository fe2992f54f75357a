"""The user's code a sweep runs: taken from its folder when the sweep starts, kept in the
sweep folder (``code/``), and read back from there when the sweep resumes, so that every
trial of a sweep, first run or resumed, runs the same code (tuner/usercode/snapshot.py)."""

from __future__ import annotations

from typing import Any

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
