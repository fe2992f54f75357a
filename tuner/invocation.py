"""How the user runs tuner from where they stand: the words every suggested command starts with.

``python -m tuner report ...`` fails outside the environment tuner is installed in (another
``python`` on PATH has no optuna, no ray): a printed command names the interpreter that runs
this process, or the ``tuner`` script when the one on PATH is this install's.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


def tuner_command() -> str:
    """``tuner`` when the script on PATH is this install's; else ``<this interpreter> -m tuner``,
    relative to the working folder when it is inside it (``.venv/bin/python -m tuner``)."""
    script = shutil.which("tuner")
    if script and _same_folder(Path(script).parent, *_script_folders()):
        return "tuner"
    return f"{_shown(sys.executable or 'python')} -m tuner"


def _script_folders() -> list[str]:
    """Where pip puts this interpreter's console scripts: its environment's, and the user's."""
    folders = [sysconfig.get_path("scripts")]
    try:
        folders.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:  # no user scheme on this platform
        pass
    return [folder for folder in folders if folder]


def _same_folder(folder: Path, *others: str) -> bool:
    return any(os.path.realpath(folder) == os.path.realpath(other) for other in others)


def _shown(executable: str) -> str:
    """Relative to the working folder when inside it; a path with spaces quoted for the shell."""
    path = Path(os.path.abspath(executable))  # not resolved: a venv's python is a link out of it
    try:
        shown = str(path.relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    if os.sep not in shown:  # a bare name would be looked up on PATH
        shown = os.path.join(".", shown)
    return f"'{shown}'" if " " in shown else shown
