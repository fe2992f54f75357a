"""``data.dataset: spark`` as users run it: ``python -m tuner sweep`` with a real Spark
session that RayDP starts on the command's own local Ray (the shipped experiment), or on a
warm one the command joins (the rest), on Parquet made here from the real MNIST files. A
prepared sweep (trained, exported, scored on Spark's test split), the second sweep on the
same input from the cache, a user's function, and the failures that must be one line and
never a hang."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from integration_helpers import data_root, small_sweep, tuner_cli, write_mnist_parquet

pytest.importorskip("raydp", reason="the spark extra (pip install 'tuner[spark]')")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROWS = 1500


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> Path:
    return write_mnist_parquet(tmp_path_factory.mktemp("spark") / "mnist", ROWS, 300)


def _file(tmp_path: Path, name: str, spark: dict, **data) -> Path:
    sweep = small_sweep(tmp_path, name=name, train={"epochs": 1}, trials={"num_samples": 2})
    sweep["data"] = {"dataset": "spark", "image_size": 28, "channels": 1, "spark": spark, **data}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _cli(*args: str, cache: Path, timeout: float = 500):
    env = {"TUNER_CACHE_DIR": str(cache), "RAY_ADDRESS": "", "TUNER_DATA_DIR": str(data_root())}
    return tuner_cli(*args, timeout=timeout, env=env)


def _sweep(path: Path, cache: Path, timeout: float = 500):
    return _cli("sweep", str(path), cache=cache, timeout=timeout)


def test_the_shipped_experiment_runs_twice_and_predict_writes_the_csv(parquet, tmp_path):
    """experiments/mnist_spark_asha.yaml as the README's ``make spark`` runs it (``--smoke``
    sizes): the first sweep with Spark kept up (its executor's CPU counted out of the
    trials'), a second from what the first prepared, then ``tuner predict`` writing the CSV."""
    cache = tmp_path / "cache"
    overrides = ["--smoke", "--set", f"data.spark.input={parquet}", "--set", f"output_dir={tmp_path / 'runs'}"]
    done = _cli("sweep", "mnist_spark_asha", *overrides, "--set", "data.spark.session.keep=true", cache=cache)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "in memory (prepared by Spark on Ray in" in done.stdout, done.stdout
    assert "preparing " in done.stdout and " with Spark on Ray (RayDP) before the trials" in done.stdout
    for noise in ("StatusConsoleListener", "sql_ctx", "log4j", "WARN "):  # Spark's own output: in its log file
        assert noise not in done.stdout + done.stderr, (noise, done.stdout[-2000:], done.stderr[-2000:])
    assert "Spark kept, 1 CPU(s) of its executors counted out of the trials'" in done.stdout, done.stdout
    assert "  1 trial(s) at once" in done.stdout, done.stdout  # 2 CPUs, 1 held by Spark's executor
    run = tmp_path / "runs" / "mnist_spark_asha"
    metrics = json.loads((run / "best" / "metrics.json").read_text())
    assert metrics["test_images"] == 300 and metrics["test_accuracy"] > 0.5, metrics  # Spark's test rows
    described = json.loads((run / "data.json").read_text())["data"]
    # statistics fitted on the training split: MNIST's digits, about 0.13 and 0.31
    assert described["mean"][0] == pytest.approx(0.13, abs=0.02) and described["std"][0] == pytest.approx(
        0.31, abs=0.02
    )
    again = _cli("sweep", "mnist_spark_asha", *overrides, cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "prepared by Spark earlier, kept; Spark stopped before the trials" in again.stdout, again.stdout
    second = tmp_path / "runs" / "mnist_spark_asha-2"
    assert not (second / "spark-data").exists()  # in tuner's cache, not the sweep's
    assert json.loads((second / "best" / "metrics.json").read_text())["test_images"] == 300
    csv = second / "predictions.csv"
    predicted = _cli("predict", str(second / "best"), "--data", "mnist:test", "--out", str(csv), cache=cache)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    rows = csv.read_text().splitlines()
    assert len(rows) == 10_001, rows[:3]  # a header and MNIST's 10,000 test digits
    header = rows[0].split(",")
    correct = sum(
        row.split(",")[header.index("predicted")] == row.split(",")[header.index("label")] for row in rows[1:]
    )
    assert correct / 10_000 > 0.5, rows[:3]


@pytest.mark.usefixtures("warm_ray")
def test_a_users_function_prepares_the_frame_the_trials_stream(parquet, tmp_path, monkeypatch):
    """A function's output is not cached (it may change unseen): the sweep keeps it in its
    own folder, as Parquet the trials stream through Ray Data, and the export scores the
    function's test rows from there."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "evens.py").write_text(
        "from pyspark.sql import functions as F\n\n"
        "def only_evens(spark, frame):\n"
        "    return frame.where(F.col('label') % 2 == 0)\n"
    )
    monkeypatch.chdir(code)
    spark = {"input": str(parquet), "split_column": "split", "function": "evens:only_evens"}
    done = _sweep(_file(tmp_path, "evens", spark, streaming=True), tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "streamed with Ray Data from Parquet (prepared by Spark on Ray in" in done.stdout, done.stdout
    run = tmp_path / "runs" / "evens"
    histories = [
        json.loads(line) for path in (run / "history").glob("*.jsonl") for line in path.read_text().splitlines()
    ]
    assert histories and all(row["val_accuracy"] > 0.3 for row in histories if "val_accuracy" in row), histories
    recorded = json.loads((run / "data.json").read_text())
    assert recorded["held"] == "stream" and recorded["data"]["num_classes"] == 9  # 0..8: the largest left is 8
    meta = json.loads((run / "spark-data" / "meta.json").read_text())
    assert list((run / "spark-data" / "train").glob("*.parquet")) and not list((tmp_path / "cache").rglob("meta.json"))
    evens = sum(
        1
        for label in pq.read_table(parquet, columns=["label", "split"]).to_pylist()
        if label["split"] == "test" and label["label"] % 2 == 0
    )
    metrics = json.loads((run / "best" / "metrics.json").read_text())
    assert meta["rows"]["test"] == evens and metrics["test_images"] == evens, (meta, metrics)
    assert metrics["test_accuracy"] > 0.3, metrics


@pytest.mark.parametrize(
    ("case", "spark", "said"),
    [
        ("raises", {"function": "broken:boom"}, "data.spark.function: broken:boom raised RuntimeError: not today"),
        ("no label", {"function": "broken:nolabel"}, "data.spark.label_column: no column 'label'"),
        (
            "never placed",
            {"session": {"executor_memory": "200g", "start_timeout_s": 10}},
            "data.spark.session.start_timeout_s: Spark was not up after 10 s",
        ),
    ],
)
@pytest.mark.usefixtures("warm_ray")  # a Spark start cut short must not crash a driver's exit here (it did: -11)
def test_a_failure_is_one_line_in_time_and_the_sweep_writes_nothing(parquet, tmp_path, monkeypatch, case, spark, said):
    code = tmp_path / "code"
    code.mkdir()
    (code / "broken.py").write_text(
        "def boom(spark, frame):\n    raise RuntimeError('not today')\n\n"
        "def nolabel(spark, frame):\n    return frame.drop('label')\n"
    )
    monkeypatch.chdir(code)
    started = time.monotonic()
    done = _sweep(_file(tmp_path, "bad", {"input": str(parquet), "split_column": "split", **spark}), tmp_path / "c")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("tuner: error:")]
    assert len(lines) == 1 and said in lines[0], done.stderr[-3000:]
    assert time.monotonic() - started < 240
    assert not (tmp_path / "runs" / "bad").exists()
