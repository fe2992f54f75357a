"""The MLflow store opened under a file lock, and every call retried while sqlite says it is locked."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tuner.folder import cache_root, store

LOCKED_SECONDS = 300.0  # how long a call keeps retrying a locked store


def _is_locked(error: BaseException) -> bool:
    """Whether an error (or what caused it) is sqlite's "database is locked"."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if "database is locked" in str(error) or "database table is locked" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def retrying(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call``, retried with jittered exponential back-off while the store is locked."""
    delay, deadline = 0.05, time.monotonic() + LOCKED_SECONDS
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as error:
            if _is_locked(error) and time.monotonic() < deadline:
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
                continue
            failure = store.failed_write(error, "the MLflow store")  # a full disk under it: one line
            if failure is not None:
                raise failure from None
            raise


class Retrying:
    """An MlflowClient whose every call goes through ``retrying``."""

    def __init__(self, client: Any):
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        return functools.partial(retrying, attribute) if callable(attribute) else attribute


@contextlib.contextmanager
def creating_store(uri: str) -> Iterator[None]:
    """Hold ``<db>.lock`` while a sqlite store is opened (and, the first time, created):
    two sweeps creating one store at once would otherwise race its schema migrations."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    database = Path(uri.removeprefix("sqlite:///"))
    lock_path = database.with_name(database.name + ".lock")
    with store.writing_to(lock_path):
        database.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not database.exists():
            _copy_schema(database)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# --- a new store from MLflow's schema, made once ---------------------------------------------------
# MLflow makes a new sqlite store by running every schema migration since its first release:
# 1.5 s of a sweep's fixed cost in a new folder. The schema those migrations leave is kept
# once per MLflow version (in the cache) and copied into each new store. The copy holds the
# tables and no experiment: MLflow, opening it, finds its schema current and adds its
# Default experiment itself, as it does on a store it has just made.


def _copy_schema(database: Path) -> None:
    """Put MLflow's empty schema at ``database`` (absent; its lock held), if it can be had."""
    template = _schema()
    if template is None:
        return
    try:
        partial = _unique_beside(database)
    except OSError:
        return  # MLflow makes the store itself, and says what stops it
    try:
        shutil.copyfile(template, partial)
        os.link(partial, database)  # never over a store that appeared meanwhile
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()


def _unique_beside(path: Path) -> Path:
    """A new empty file of this process and thread's own beside ``path``, for its next version,
    with the mode a new file gets (mkstemp's is 0600; sqlite would have made 0644)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~store.umask())
    finally:
        os.close(fd)
    return Path(name)


def _schema() -> Path | None:
    """The cached empty store of the installed MLflow, made now if missing; None where the
    cache cannot be written (MLflow then migrates the new store itself)."""
    try:
        import mlflow
        import sqlalchemy
        from mlflow.store.db.utils import _initialize_tables
    except ImportError:  # a later MLflow without it: its own way
        return None
    template = cache_root() / "mlflow" / f"schema-{mlflow.__version__}.db"
    if template.is_file():
        return template
    partial = None
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        partial = _unique_beside(template)
        engine = sqlalchemy.create_engine(f"sqlite:///{partial}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(partial, template)
    except (OSError, sqlalchemy.exc.SQLAlchemyError):
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()
        return None
    return template
