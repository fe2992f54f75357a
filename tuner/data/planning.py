"""Which data a sweep's ``data`` section names, planned before Ray starts: a built-in set
or a user's own files (tuner/data/datasets.py), or a Spark preparation (tuner/data/spark.py)."""

from __future__ import annotations

from typing import Any

from tuner.data.datasets import BuiltinData, OwnData, TrainingData, plan_data
from tuner.data.datasets import held_out as held_out_files
from tuner.data.spark import SparkData


def plan(config: Any, *, seed: int) -> TrainingData | OwnData | SparkData:
    """Before Ray starts: a built-in set read, a user's files listed and checked, or Spark's
    environment checked (its preparation runs once Ray does)."""
    if config.dataset == "spark":
        return SparkData(config, seed)
    return plan_data(config, seed=seed)


def held_out(config: Any, *, seed: int, folder: Any = None) -> BuiltinData | OwnData | SparkData:
    """What the export reads of a sweep's data (``describe``, ``test_chunks``, ``examples``);
    ``folder``: the sweep's (tuner.folder.store.SweepFolder), where Spark's preparation of a
    URI input or a user's function is kept."""
    if config.dataset == "spark":
        return SparkData(config, seed, own=folder.spark_data if folder is not None else None)
    return held_out_files(config, seed=seed)
