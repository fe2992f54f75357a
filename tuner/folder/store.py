"""The sweep folder, ``<output_dir>/<name>/``: one module owns it.

Its paths (``SweepFolder``: a local path or a storage URI), the lock held by the one
process writing it, and every write (atomic, or an append that leaves no partial line).
The records tuner keeps there are in tuner/folder/records.py. status, best, export,
MLflow and the sweep itself all go through these two, so a second run, a second process
or a full disk cannot mix or lose what a sweep recorded.

A new sweep always claims a folder no run has used (``<name>``, else ``<name>-2``,
``<name>-3``, ...); only ``resume`` goes back into an existing one, under its lock.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import remote
from tuner.folder.holder import holder_note, in_use_message
from tuner.folder.remote import join

CONFIG_FILE = "sweep.yaml"
LOCK_FILE = "lock"
HISTORY_DIR = "history"
TIMELINE_FILE = "timeline.jsonl"
MLFLOW_FILE = "mlflow.json"
DATA_FILE = "data.json"  # a user's own data as the sweep saw them (classes, shape, statistics, how held)
LENT_CORES_FILE = ".tuner-threads.json"  # in tune/: {trial id: torch threads}, spare cores lent to the last trials


class StorageError(TunerError):
    """The machine refused a write (disk full, read-only, no permission): one line, and
    what was recorded before is kept."""


MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
FULL_DISK_TEXTS = ("No space left on device", "database or disk is full", "readonly database", "Disk quota exceeded")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@dataclass(frozen=True)
class SweepFolder:
    """Where each record of one sweep lives.

    ``remote``: for a sweep at a storage URI (``tuner.folder.remote``), the folder's URI; ``root``
    is then this command's local working copy of tuner's records, and Tune's and Train's
    folders are at the URI only.
    """

    root: Path
    remote: str | None = None
    # The Tune experiment this command works on: tune/ (1), then tune-2/, tune-3/, ... one per
    # ``tuner extend`` (tuner/driver/extend.py); opening a folder gives its newest.
    part: int = 1
    # The highest folder above ``root`` that claiming it created (output_dir, or a parent of
    # it): removed again, if empty, with a folder a refused sweep leaves unused.
    made: Path | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def open(cls, where: str | Path) -> SweepFolder:
        """An existing sweep folder, named by its path or its storage URI. One at a URI is
        read through a working copy of tuner's records, removed when the command ends."""
        if remote.is_remote(where):
            uri = str(where)
            if not remote.exists(remote.join(uri, CONFIG_FILE)):
                raise TunerError(f"{uri} is not a sweep folder (no sweep.yaml); give <output_dir>/<sweep name>")
            root = remote.working_copy(remote.name(uri))
            atexit.register(remote.discard, root)
            remote.pull(uri, root)
            return cls(root, remote=uri)
        root = Path(where).expanduser().resolve()
        if not (root / CONFIG_FILE).is_file():
            raise TunerError(f"{root} is not a sweep folder (no sweep.yaml); give runs/<sweep name>")
        extensions = [int(p.name.split("-")[1]) for p in root.glob("tune-*") if p.name.split("-")[1].isdigit()]
        return cls(root, part=max(extensions, default=1))

    def parts(self) -> list[SweepFolder]:
        """This folder's Tune experiments, the first sweep's and each extension's, oldest first."""
        return [dataclasses.replace(self, part=k) for k in range(1, self.part + 1)]

    def extended(self) -> SweepFolder:
        """The folder with its next Tune experiment, for ``tuner extend``."""
        return dataclasses.replace(self, part=self.part + 1)

    @classmethod
    def claim(cls, output_dir: str | Path, name: str) -> SweepFolder:
        """A folder no run has used, under ``output_dir`` (a path or a storage URI): see
        ``claim_new``. At a URI, this command writes a local working copy and mirrors it."""
        if remote.is_remote(output_dir):
            uri = remote.claim_new(str(output_dir), name)
            return cls(remote.working_copy(remote.name(uri)), remote=uri)
        return claim_new(output_dir, name)

    @property
    def output_dir(self) -> str:
        """The folder (or URI) this sweep folder is in: the sweep's ``output_dir`` now."""
        return remote.parent(self.remote) if self.remote else str(self.root.parent)

    def read_tune_file(self, name: str) -> bytes:
        """A file in Tune's own folder (``tune/<name>``), wherever the sweep is."""
        if self.remote:
            return remote.read_bytes(join(self.tune_uri, name))
        return (self.tune / name).read_bytes()

    def write_tune_file(self, name: str, data: bytes) -> None:
        """Replace a file in Tune's own folder whole (atomically on a local disk)."""
        if self.remote:
            remote.write_bytes(join(self.tune_uri, name), data)
        else:
            write_atomic(self.tune / name, data)

    def tune_file_names(self) -> list[str]:
        """The names of the files directly in Tune's own folder."""
        if self.remote:
            return [name for name in remote.list_files(self.tune_uri) if "/" not in name]
        return sorted(p.name for p in self.tune.iterdir() if p.is_file()) if self.tune.is_dir() else []

    def has_tune_file(self, name: str) -> bool:
        return remote.exists(join(self.tune_uri, name)) if self.remote else (self.tune / name).exists()

    @property
    def where(self) -> str:
        """The sweep folder as users name it: its URI, else its path."""
        return self.remote or str(self.root)

    @property
    def tune_storage(self) -> str:
        """Tune's ``storage_path`` (Tune's own folder is ``<it>/tune``)."""
        return self.remote or str(self.root)

    @property
    def tune_uri(self) -> str:
        """Tune's experiment folder, for restore and analysis."""
        return join(self.remote, self.tune.name) if self.remote else str(self.tune)

    @property
    def train_storage(self) -> str:
        """Ray Train's ``storage_path`` for the TorchTrainer trials."""
        return join(self.remote, "train") if self.remote else str(self.train)

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def tune(self) -> Path:
        return self.root / ("tune" if self.part == 1 else f"tune-{self.part}")

    @property
    def train(self) -> Path:
        return self.root / "train"

    @property
    def best(self) -> Path:
        return self.root / "best"

    @property
    def history(self) -> Path:
        return self.root / HISTORY_DIR

    @property
    def timeline(self) -> Path:
        return self.root / TIMELINE_FILE

    @property
    def mlflow_state(self) -> Path:
        return self.root / MLFLOW_FILE

    @property
    def code(self) -> Path:
        """The user's code the sweep runs (a snapshot: tuner/usercode/snapshot.py)."""
        return self.root / "code"

    @property
    def data_description(self) -> Path:
        return self.root / DATA_FILE

    @property
    def spark_data(self) -> Path | None:
        """Spark's prepared splits when tuner's cache cannot keep them (a URI input, a user's
        function): the export's test split and a resume read them. None at a storage URI."""
        return None if self.remote else self.root / "spark-data"


# --- writes -----------------------------------------------------------------------------
def umask() -> int:
    """The process's umask, read once at import."""
    return _UMASK


def storage_error(path: Path | str, error: BaseException | str) -> StorageError:
    """The one-line error for a write the machine refused (and a note of it for the driver)."""
    reason = error if isinstance(error, str) else getattr(error, "strerror", None) or type(error).__name__
    failure = StorageError(f"{path}: cannot write ({reason}); what was recorded before it is kept")
    if (noted := _FAILED_WRITES.get()) is not None:
        noted.append(failure)
    return failure


def note_failed_write(failure: StorageError) -> None:
    """A refused write met elsewhere (the MLflow writer's process), noted for ``failed_write``."""
    if (noted := _FAILED_WRITES.get()) is not None:
        noted.append(failure)


def failed_write(error: BaseException | str, where: Path | str = "the output folder") -> StorageError | None:
    """The write failure behind ``error`` (a stopped fit, a failed export), if there is one;
    ``where`` names the place when the error itself does not. (Tune gives a trial's error as
    its text where it could not keep the exception: a trial process it could not reuse.)"""
    if noted := _FAILED_WRITES.get():
        return noted[0]
    seen: set[int] = set()
    cause: Any = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, StorageError):
            return cause
        if isinstance(cause, OSError) and cause.errno in MACHINE_ERRNOS:
            return storage_error(cause.filename or where, cause)
        text = next((t for t in FULL_DISK_TEXTS if t in str(cause)), None)
        if text is not None:
            return storage_error(where, text)
        cause = getattr(cause, "__cause__", None) or getattr(cause, "__context__", None)
    # Tune may meet the full disk first, as an empty file it wrote (error.pkl): what the
    # disk says is then the cause.
    with contextlib.suppress(OSError):
        usage = shutil.disk_usage(where)
        if usage.free < max(16 * 2**20, usage.total // 100):
            return storage_error(where, os.strerror(errno.ENOSPC))
    return None


@contextlib.contextmanager
def writing_to(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise storage_error(path, error) from None


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write a whole file or nothing: a temporary file beside it, then a rename."""
    path = Path(path)
    with writing_to(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(
            "wb", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
        )
        try:
            with handle:
                os.fchmod(handle.fileno(), 0o666 & ~_UMASK)  # as open() would; mkstemp gives 0600
                handle.write(text.encode() if isinstance(text, str) else text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(handle.name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(handle.name)
            raise


def append_line(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line; on a failed write the file is cut back to its last whole line."""
    append_lines(path, [row])


def append_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append JSON lines in one write; on a failed write the file is cut back to its last whole line."""
    path = Path(path)
    line = "".join(json.dumps(row) + "\n" for row in rows).encode()
    with writing_to(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError:
                os.ftruncate(fd, size)  # needs no space
                raise
        finally:
            os.close(fd)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines record; a corrupt line is one TunerError naming file and line."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise TunerError(f"{path}: cannot be read ({_reason(error)})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise TunerError(
                f"{path}:{number}: not a JSON record ({error.msg}); the file is corrupt or was cut short"
            ) from None
        if not isinstance(row, dict):
            raise TunerError(f"{path}:{number}: not a JSON record (got {type(row).__name__})")
        rows.append(row)
    return rows


def read_json(path: Path, *, what: str) -> dict[str, Any]:
    """A JSON object file written by tuner; a malformed one is one TunerError naming it."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TunerError(f"{path}: not a readable {what} ({_reason(error)})") from None
    if not isinstance(value, dict):
        raise TunerError(f"{path}: not a readable {what} (a JSON object expected, got {type(value).__name__})")
    return value


def _reason(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or getattr(error, "msg", None) or str(error)
    return f"{type(error).__name__}: {str(text).splitlines()[0] if str(text).strip() else ''}".rstrip(": ")


# --- claiming and locking ---------------------------------------------------------------------
def claim_new(output_dir: str | Path, name: str) -> SweepFolder:
    """A folder no run has used: ``<name>``, else ``<name>-2``, ``<name>-3``, ...

    ``mkdir`` either creates the folder or fails, so two sweeps started at once never
    get the same one, and an existing folder (a finished sweep, an unfinished one, or
    anything of the user's) is never written into.
    """
    parent = Path(output_dir).expanduser().resolve()
    missing = [folder for folder in (parent, *parent.parents) if not folder.exists()]
    with writing_to(parent):
        parent.mkdir(parents=True, exist_ok=True)
        for number in itertools.count(1):
            root = parent / (name if number == 1 else f"{name}-{number}")
            try:
                root.mkdir()
            except FileExistsError:
                continue
            return SweepFolder(root, made=missing[-1] if missing else None)
    raise AssertionError("unreachable")


def release_unused(folder: SweepFolder) -> None:
    """Remove a claimed folder that never got past its config, lock and the user's code as it
    took them (Ray failed to start, a check on the cluster refused the sweep), so the next
    run takes the name again, and the empty folders claiming it made (``output_dir``). Only
    what this run wrote: the folder was new when claimed (``claim_new``)."""
    try:
        if {p.name for p in folder.root.iterdir()} - {CONFIG_FILE, LOCK_FILE, folder.code.name}:
            return  # the sweep got further: keep everything
    except OSError:
        return
    for path in (folder.config, folder.lock):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    shutil.rmtree(folder.code, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.root.rmdir()  # only if nothing else is in it
    if folder.made is None or folder.remote:
        return
    for parent in (folder.root.parent, *folder.root.parent.parents):  # up to the one it made, each if empty
        if not parent.is_relative_to(folder.made):
            break
        try:
            parent.rmdir()
        except OSError:
            break


class HoldsFolder:
    """For a Tune callback that holds the sweep's SweepFolder as ``folder``: a resumed sweep's
    callbacks come from Tune's pickle, and one pickled by a tuner before issue 40 holds it as
    ``paths``."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "paths" in state and "folder" not in state:
            state["folder"] = state.pop("paths")
        self.__dict__.update(state)


class SweepLock:
    """An exclusive lock on a sweep folder, held by the one process writing it.

    ``flock`` is released by the kernel when the holder exits, even by SIGKILL, so a
    crashed sweep never leaves a stale lock. The file names the holder, for the
    message the next process prints.
    """

    def __init__(self, folder: SweepFolder):
        self.folder = folder
        self._fd: int | None = None

    def __enter__(self) -> SweepLock:
        path = self.folder.lock
        with writing_to(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TunerError(in_use_message(str(self.folder.root), _holder(path))) from None
        holder = holder_note()
        with contextlib.suppress(OSError):  # the lock holds even if the note cannot be written
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode() + b"\n", 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def in_use(folder: SweepFolder) -> bool:
    """Whether a process holds the folder's lock now (a sweep or resume is running); at a
    storage URI, whether its lock object was refreshed lately.

    A shared ``flock`` attempt fails while the exclusive one is held; when it succeeds it
    is released at once, so a sweep starting in that instant may, at worst, be refused in
    one line."""
    if folder.remote:
        try:
            remote.check_unlocked(folder.remote)
        except TunerError:
            return True
        return False
    try:
        fd = os.open(folder.lock, os.O_RDONLY)
    except OSError:
        return False  # no lock file: nothing ever ran here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --- the sweep's own records ------------------------------------------------------------------
# The sweep a driver is running, as contexts rather than module state: the folder it
# writes, and the writes the machine refused meanwhile. Tune calls its callbacks in the
# thread that called fit(); a thread that writes for them runs in a copy of the context
# (tracking's MLflow writer).
_WRITING: ContextVar[SweepFolder | None] = ContextVar("tuner_sweep_folder", default=None)
# Tune turns an error in one of its callbacks into a TuneError that carries only text:
# the driver names the first refused write when Tune stops.
_FAILED_WRITES: ContextVar[list[StorageError] | None] = ContextVar("tuner_failed_writes", default=None)


@contextlib.contextmanager
def writing_records_to(folder: SweepFolder) -> Iterator[None]:
    """Point the Tune callbacks at ``folder`` while a sweep runs. A resumed sweep's callbacks
    come back from Tune's pickle with the folder they were made for, which is stale when
    the folder was moved or copied since."""
    token = _WRITING.set(folder)
    try:
        yield
    finally:
        _WRITING.reset(token)


@contextlib.contextmanager
def noting_failed_writes() -> Iterator[None]:
    """Keep the writes refused in this context (``storage_error``), for ``failed_write``."""
    token = _FAILED_WRITES.set([])
    try:
        yield
    finally:
        _FAILED_WRITES.reset(token)


def current(folder: SweepFolder) -> SweepFolder:
    """The folder being written now, else ``folder``."""
    return _WRITING.get() or folder
