"""A new sqlite store is MLflow's schema copied from the cache, not migrated again each time."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tuner.tracking import mlflow_store

MIGRATING = "Creating initial MLflow database tables"


def _open(path: Path) -> MlflowClient:
    uri = f"sqlite:///{path}"
    with mlflow_store.creating_store(uri):
        client = MlflowClient(uri)
        client.search_experiments()  # MLflow makes (or opens) the store here
    return client


def _schema(path: Path) -> dict[str, set[str]]:
    """Each table's and index's definition, as a set of its lines: MLflow's own migrations
    write a table's constraints in an order that differs from one run to the next."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, sql FROM sqlite_master").fetchall()
    return {name: {line.strip().rstrip(",") for line in (sql or "").splitlines()} for name, sql in rows}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_new_store_is_the_cached_schema_and_mlflow_migrates_nothing(tmp_path, cache, caplog):
    made_by_mlflow = tmp_path / "plain" / "mlflow.db"
    made_by_mlflow.parent.mkdir()
    MlflowClient(f"sqlite:///{made_by_mlflow}").search_experiments()

    with caplog.at_level(logging.INFO):
        _open(tmp_path / "first" / "mlflow.db")  # makes the cached schema
        caplog.clear()
        second = _open(tmp_path / "second" / "mlflow.db")
    assert MIGRATING not in caplog.text
    assert list((cache / "mlflow").glob("schema-*.db")), "no schema kept in the cache"
    for store in ("first", "second"):
        assert _schema(tmp_path / store / "mlflow.db") == _schema(made_by_mlflow)
        # readable by whoever could read a store MLflow made (mkstemp's 0600 was not)
        assert (tmp_path / store / "mlflow.db").stat().st_mode == made_by_mlflow.stat().st_mode
    # MLflow added its Default experiment itself, where it would on a store of its own making.
    (default,) = second.search_experiments()
    assert default.experiment_id == "0" and default.name == "Default"
    plain_default = MlflowClient(f"sqlite:///{made_by_mlflow}").get_experiment("0")
    assert default.artifact_location == plain_default.artifact_location
    run = second.create_run(second.create_experiment("sweep"))
    second.log_metric(run.info.run_id, "val_accuracy", 0.9, step=1)
    assert second.get_metric_history(run.info.run_id, "val_accuracy")[0].value == 0.9


def test_an_existing_store_is_opened_as_it_is(tmp_path, cache):
    path = tmp_path / "mlflow.db"
    _open(path).create_experiment("kept")
    before = path.read_bytes()
    assert [e.name for e in _open(path).search_experiments(order_by=["name"])] == ["Default", "kept"]
    assert path.read_bytes() == before


def test_a_cache_that_cannot_be_written_leaves_the_store_to_mlflow(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.INFO):
        client = _open(tmp_path / "store" / "mlflow.db")
    assert MIGRATING in caplog.text
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert blocker.read_text() == ""
