"""The user's code folder as a snapshot: every Python file under it, read once when the
sweep starts.

The snapshot is what every trial imports (on any node: it travels with the trial's
settings and is written to the node's temporary folder, one copy per content), what the
sweep folder keeps (``code/``, so a resume runs the code the sweep began with) and what
the export carries (so ``predict`` and the registered model load on a machine that never
saw the user's folder). Ray's own ``working_dir`` would ship it too, but only to a job's
workers and not into the sweep folder or the export.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import TunerError

# Folders no user code lives in: tools' and tuner's own output, environments, data.
SKIPPED = {"__pycache__", "runs", "mlruns", "data", "node_modules", "site-packages", "venv", "env", "build", "dist"}
MAX_BYTES = 8 * 1024 * 1024  # of Python source: more is a data or environment folder


@dataclass(frozen=True)
class CodeSnapshot:
    """Python files by their path under the code folder, and a digest of them all."""

    root: str  # the folder they were read from (for messages; the trial never reads it)
    files: dict[str, bytes] = field(repr=False)
    digest: str = ""

    def materialise(self) -> Path:
        """The snapshot as a folder on this node (written once per content, atomically)."""
        where = Path(tempfile.gettempdir()) / "tuner-code" / self.digest
        if where.is_dir():
            return where
        where.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.digest}.", dir=where.parent))
        write_files(self.files, staging)
        try:
            staging.rename(where)
        except OSError:  # another trial on this node wrote it first
            if not where.is_dir():
                raise
            import shutil

            shutil.rmtree(staging, ignore_errors=True)  # our own staging copy
        return where


def take(folder: str | os.PathLike) -> CodeSnapshot:
    """Every ``.py`` file under ``folder`` (hidden folders, environments and data skipped)."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise TunerError(f"code_dir: {str(folder)!r} is not a folder")
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(_python_files(root)):
        data = path.read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            raise TunerError(
                f"code_dir: {root} holds more than {MAX_BYTES // 2**20} MB of Python files; "
                "point code_dir at the folder with just your code"
            )
        files[path.relative_to(root).as_posix()] = data
    return CodeSnapshot(str(root), files, _digest(files))


def _python_files(root: Path) -> Iterator[Path]:
    for here, folders, names in os.walk(root):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in SKIPPED and not _is_env(Path(here, f))]
        yield from (Path(here, name) for name in names if name.endswith(".py"))


def _is_env(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").exists()


def _digest(files: dict[str, bytes]) -> str:
    hasher = hashlib.sha256()
    for name, data in sorted(files.items()):
        hasher.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return hasher.hexdigest()[:16]


def write_files(files: dict[str, bytes], folder: Path) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def read(folder: str | os.PathLike) -> CodeSnapshot:
    """A snapshot written to ``folder`` before (a sweep folder's ``code/``, an export's)."""
    root = Path(folder)
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(_python_files(root))}
    return CodeSnapshot(str(root), files, _digest(files))


@contextlib.contextmanager
def importable(folder: str | os.PathLike) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for a while; modules it shadows are imported afresh."""
    folder = str(Path(folder).resolve())
    _forget_modules_outside(folder)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def put_first_on_path(folder: str | os.PathLike) -> None:
    """``folder`` first on ``sys.path`` for the rest of the process (a trial's process)."""
    folder = str(Path(folder).resolve())
    if sys.path[:1] != [folder]:
        _forget_modules_outside(folder)
        sys.path.insert(0, folder)


def _forget_modules_outside(folder: str) -> None:
    """Drop imported modules that a file under ``folder`` would now provide (a module of
    the same name imported from another folder earlier in this process)."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or path.startswith(folder + os.sep):
            continue
        top = name.split(".")[0]
        if (Path(folder) / f"{top}.py").is_file() or (Path(folder) / top / "__init__.py").is_file():
            if "site-packages" not in path and not path.startswith(sys.prefix):
                del sys.modules[name]
