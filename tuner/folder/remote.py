"""A sweep folder at a storage URI: ``output_dir: s3://bucket/runs`` (or ``gs://``, or any
URI that ``pyarrow.fs`` opens, which is what Ray Tune's storage takes).

Ray Tune and Ray Train write their experiment state, results and checkpoints straight
to the URI, from whichever node a trial runs on. tuner's own records (``sweep.yaml``,
``history/``, ``timeline.jsonl``, ``mlflow.json``, ``best/``) are written by the driver
alone, so the driver writes them into a local working copy, with the same code as for
a local folder, and a ``Mirror`` copies what changed to the URI every
``MIRROR_EVERY_S`` seconds while the command runs and once more when it ends. Every
command that reads a sweep at a URI first copies those records (never Tune's
checkpoints) into a working copy of its own, so two commands never share one.

The folder's lock is an object, ``<folder>/lock``, naming its holder; each mirror pass
refreshes it, and one not refreshed for ``STALE_AFTER_S`` is a stopped driver's. Object
stores have no exclusive create: two sweeps that claim the same new folder in the same
moment could both take it, so start concurrent sweeps with different names.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import cache_root
from tuner.folder.holder import holder_note, in_use_message

MIRROR_EVERY_S = 10.0
STALE_AFTER_S = 120.0
LOCK_OBJECT = "lock"
TUNE_OWNED = ("tune", "train")  # written to the URI by Ray itself, never mirrored


def is_remote(where: str | os.PathLike) -> bool:
    """Whether ``where`` names storage at a URI (``s3://...``), not a local path: the one
    place tuner decides it."""
    return "://" in str(where)


def usable_uri(value: str) -> bool:
    """scheme://bucket[/folder]; file:///abs/path has no bucket."""
    parts = urllib.parse.urlsplit(value)
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", parts.scheme):
        return False
    return bool(parts.netloc) or (parts.scheme == "file" and parts.path.strip("/") != "")


def on_local_disk(filesystem: Any) -> bool:
    """Whether a ``pyarrow.fs`` filesystem (a Tune or Train checkpoint's) is this machine's disk."""
    import pyarrow.fs

    return isinstance(filesystem, pyarrow.fs.LocalFileSystem)


def located(filesystem: Any, path: str) -> str:
    """A path on a ``pyarrow.fs`` filesystem as users name it: the path on a local disk,
    else a URI."""
    return str(path) if on_local_disk(filesystem) else f"{filesystem.type_name}://{path}"


def same_on_every_node(where: str) -> bool:
    """A storage URI or an absolute path: it names the same place from every node."""
    return is_remote(where) or Path(where).is_absolute()


def join(uri: str, *parts: str) -> str:
    """``uri`` + ``/part/...``, keeping a query (``?endpoint_override=...``) at the end."""
    base, _, query = uri.partition("?")
    return "/".join([base.rstrip("/"), *parts]) + (f"?{query}" if query else "")


def parent(uri: str) -> str:
    base, _, query = uri.partition("?")
    return base.rstrip("/").rsplit("/", 1)[0] + (f"?{query}" if query else "")


def name(uri: str) -> str:
    return uri.partition("?")[0].rstrip("/").rsplit("/", 1)[-1]


def filesystem(uri: str) -> tuple[Any, str]:
    """The ``pyarrow.fs`` filesystem and path for ``uri``; one line if it cannot be opened."""
    import pyarrow
    import pyarrow.fs

    try:
        return pyarrow.fs.FileSystem.from_uri(uri)
    except (pyarrow.ArrowException, OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TunerError(f"{uri}: cannot open this storage URI ({reason})") from None


def exists(uri: str) -> bool:
    """Whether ``uri`` names a file or folder; a local path is checked on this machine."""
    if not is_remote(uri):
        return os.path.exists(uri)
    import pyarrow.fs

    fs, path = filesystem(uri)
    return _remote_call(uri, lambda: fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound)


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)

    def read() -> bytes:
        with fs.open_input_stream(path) as stream:
            return stream.read()

    return _remote_call(uri, read)


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = filesystem(uri)

    def write() -> None:
        with fs.open_output_stream(path) as stream:
            stream.write(data)

    _remote_call(uri, write)


def list_files(uri: str) -> list[str]:
    """The files under ``uri``, as paths relative to it ('' when there is none)."""
    import pyarrow.fs

    fs, base = filesystem(uri)
    selector = pyarrow.fs.FileSelector(base, recursive=True, allow_not_found=True)
    infos = _remote_call(uri, lambda: fs.get_file_info(selector))
    return sorted(i.path[len(base) :].lstrip("/") for i in infos if i.type == pyarrow.fs.FileType.File)


def delete(uri: str) -> None:
    fs, path = filesystem(uri)
    with contextlib.suppress(FileNotFoundError):
        _remote_call(uri, lambda: fs.delete_file(path))


def _remote_call(uri: str, call: Any) -> Any:
    """Storage errors (no bucket, no credentials, no network) as one line naming the URI."""
    import pyarrow

    try:
        return call()
    except FileNotFoundError:
        raise
    except (OSError, pyarrow.ArrowException) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TunerError(f"{uri}: {reason}") from None


# --- working copies -------------------------------------------------------------------------
def working_copy(folder_name: str) -> Path:
    """A new local folder ``.../<random>/<folder_name>`` for one command's copy of the records."""
    base = cache_root() / "working"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base)) / folder_name
    root.mkdir()
    return root


def discard(root: Path) -> None:
    """Remove a working copy (``.../<random>/<name>``) made by ``working_copy``."""
    shutil.rmtree(root.parent, ignore_errors=True)


def pull(uri: str, root: Path) -> None:
    """Copy the sweep's own records (not Tune's folders, not the lock) into ``root``."""
    for relative in list_files(uri):
        if relative.split("/", 1)[0] in TUNE_OWNED or relative == LOCK_OBJECT:
            continue
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_bytes(join(uri, relative)))


def claim_new(output_uri: str, sweep_name: str) -> str:
    """The URI of a folder no run has used: ``<name>``, else ``<name>-2``, ..."""
    for number in range(1, 10_000):
        uri = join(output_uri, sweep_name if number == 1 else f"{sweep_name}-{number}")
        if not exists(uri):
            return uri
    raise TunerError(f"{output_uri}: no free folder name for sweep {sweep_name!r}")


def release_unused(uri: str) -> None:
    """Remove a claimed folder that holds nothing but its config and lock (tuner's own)."""
    with contextlib.suppress(TunerError):
        if set(list_files(uri)) <= {"sweep.yaml", LOCK_OBJECT}:
            delete(join(uri, "sweep.yaml"))
            delete(join(uri, LOCK_OBJECT))


# --- the lock and the mirror ------------------------------------------------------------------
def check_unlocked(uri: str) -> None:
    """Refuse a folder whose lock another driver refreshed less than STALE_AFTER_S ago."""
    try:
        holder = json.loads(read_bytes(join(uri, LOCK_OBJECT)))
    except FileNotFoundError:
        return
    except ValueError:
        return  # a torn note: its writer is gone
    age = time.time() - float(holder.get("refreshed", 0))
    if age < STALE_AFTER_S:
        raise TunerError(in_use_message(uri, holder))


class Mirror:
    """While a command writes a sweep at a URI: hold its lock object and copy the working
    copy's changed files to the URI every MIRROR_EVERY_S seconds and at the end."""

    def __init__(self, root: Path, uri: str):
        self.root, self.uri = root, uri
        self._sent: dict[str, tuple[int, int]] = {}
        self._note = holder_note()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tuner-mirror", daemon=True)
        self.error: TunerError | None = None
        self.pushed_all = False  # the last pass, at the end, sent everything

    def __enter__(self) -> Mirror:
        check_unlocked(self.uri)
        self._refresh_lock()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.push()
        except TunerError as error:
            raise TunerError(f"{error}; tuner's records are kept in {self.root}") from None
        finally:
            with contextlib.suppress(TunerError):
                delete(join(self.uri, LOCK_OBJECT))
        self.pushed_all = True

    def _run(self) -> None:
        while not self._stop.wait(MIRROR_EVERY_S):
            try:
                self.push()
            except TunerError as error:  # a storage hiccup: the next pass tries again
                self.error = error

    def _refresh_lock(self) -> None:
        write_bytes(join(self.uri, LOCK_OBJECT), json.dumps({**self._note, "refreshed": time.time()}).encode())

    def push(self) -> None:
        """Copy new and changed files; drop files of ``best/`` that a new export replaced."""
        with self._lock:
            local = {}
            for path in sorted(self.root.rglob("*")):
                relative = path.relative_to(self.root).as_posix()
                if path.is_file() and relative.split("/", 1)[0] not in ("lock", *TUNE_OWNED):
                    local[relative] = path
            for relative, path in local.items():
                try:
                    stat = path.stat()
                    stamp = (stat.st_mtime_ns, stat.st_size)
                    if self._sent.get(relative) == stamp:
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue  # replaced while we looked: the next pass sends it
                write_bytes(join(self.uri, relative), data)
                self._sent[relative] = stamp
            for relative in [r for r in self._sent if r not in local and r.startswith("best/")]:
                delete(join(self.uri, relative))
                del self._sent[relative]
            self._refresh_lock()


@contextlib.contextmanager
def mirrored(root: Path, uri: str | None) -> Iterator[Mirror | None]:
    """``Mirror`` for a sweep at a URI; nothing for a local folder."""
    if uri is None:
        yield None
        return
    with Mirror(root, uri) as mirror:
        yield mirror
