"""``data.dataset: spark`` before Ray starts: the sweep file's section, the environment
(the extra installed, a Java Spark runs on) and the input, each refused in one line."""

from __future__ import annotations

import stat
import textwrap
from pathlib import Path

import pytest

from tuner.data import spark, spark_preparation, spark_session
from tuner.errors import ConfigError, TunerError
from tuner.sweepfile.load import load_sweep


def _sweep(tmp_path: Path, data: str) -> Path:
    path = tmp_path / "spark.yaml"
    path.write_text(textwrap.dedent(f"name: s\noutput_dir: {tmp_path / 'runs'}\ndata:\n{textwrap.indent(data, '  ')}"))
    return path


def test_a_spark_section_loads_with_its_defaults(tmp_path):
    sweep = load_sweep(
        str(_sweep(tmp_path, "dataset: spark\nimage_size: 28\nchannels: 1\nspark: {input: x.parquet}\n"))
    )
    assert sweep.data.spark.session.executors == 1 and sweep.data.spark.session.start_timeout_s == 180
    assert sweep.data.spark.standardise and sweep.data.spark.label_column == "label"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("dataset: spark\nimage_size: 28\n", "data.spark: dataset 'spark' is read and prepared as data.spark says"),
        ("dataset: mnist\nspark: {input: x.parquet}\n", "but got dataset 'mnist'"),
        ("dataset: spark\nspark: {input: x.parquet}\n", "data.image_size: Spark's images are decoded"),
        (
            "dataset: spark\nimage_size: 28\nspark: {input: x, session: {executors: 0}}\n",
            "data.spark.session.executors",
        ),
        ("dataset: spark\nimage_size: 28\nspark: {input: x, session: {executor_memory: lots}}\n", "executor_memory"),
        ("dataset: spark\nimage_size: 28\nspark: {input: x, function: not a function}\n", "data.spark.function"),
        ("dataset: spark\nimage_size: 28\nspark: {input: x, fromat: csv}\n", "did you mean 'format'?"),
    ],
)
def test_a_bad_spark_section_is_one_line_naming_the_field(tmp_path, data, said):
    with pytest.raises(ConfigError) as refused:
        load_sweep(str(_sweep(tmp_path, data)))
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ('openjdk version "21" 2023-09-19', 21),
        ("no version here", None),
    ],
)
def test_the_java_version_is_read_as_java_prints_it(text, major):
    assert spark_session.java_major(text) == major


def _fake_java(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2023-09-19' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return folder


def test_a_java_spark_does_not_run_on_is_refused_saying_what_to_install(tmp_path, monkeypatch):
    pytest.importorskip("raydp", reason="the spark extra")
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path / "jdk21" / "bin", "21").parent))
    with pytest.raises(TunerError) as refused:
        spark_session.check_environment()
    said = str(refused.value)
    assert "Spark 3.5 runs on Java 8, 11, 17" in said and "is Java 21" in said and "openjdk-17" in said


def test_no_java_at_all_is_refused_saying_what_to_install(tmp_path, monkeypatch):
    pytest.importorskip("raydp", reason="the spark extra")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing named java there
    with pytest.raises(TunerError) as refused:
        spark_session.check_environment()
    assert "none found" in str(refused.value) and "openjdk-17" in str(refused.value)


def test_java_17_gets_its_module_flags_on_every_java_spark_starts():
    class Session:
        configs = {"spark.executor.extraJavaOptions": "-Xss4m", "spark.sql.shuffle.partitions": "4"}

    configs = spark_session.spark_configs(Session(), 17)
    for key in spark_session.JAVA_OPTION_KEYS:
        assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in configs[key]
    assert configs["spark.executor.extraJavaOptions"].endswith("-Xss4m")  # the file's own kept
    assert configs["spark.sql.shuffle.partitions"] == "4"
    assert "spark.driver.extraJavaOptions" not in spark_session.spark_configs(Session(), 11)


def test_a_missing_local_input_is_refused_before_ray_starts(tmp_path):
    pytest.importorskip("raydp", reason="the spark extra")
    sweep = load_sweep(
        str(_sweep(tmp_path, f"dataset: spark\nimage_size: 28\nspark: {{input: {tmp_path / 'nothing.parquet'}}}\n"))
    )
    with pytest.raises(TunerError) as refused:
        spark.SparkData(sweep.data, seed=0)
    assert "data.spark.input" in str(refused.value) and "does not exist" in str(refused.value)


def test_a_function_that_cannot_be_imported_is_refused_before_ray_starts(tmp_path, monkeypatch):
    pytest.importorskip("raydp", reason="the spark extra")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prep.py").write_text("def tidy(spark, frame):\n    return frame\n")
    (tmp_path / "in.parquet").write_bytes(b"x")
    data = "dataset: spark\nimage_size: 28\nspark: {input: in.parquet, function: 'prep:missing'}\n"
    sweep = load_sweep(str(_sweep(tmp_path, data)))
    with pytest.raises(TunerError) as refused:
        spark.SparkData(sweep.data, seed=0)
    assert "data.spark.function: prep has no function 'missing'" in str(refused.value)
    assert callable(spark_session.function_of("prep:tidy"))


def test_the_input_format_comes_from_its_name_unless_given():
    class Config:
        def __init__(self, input: str, format: str = "auto") -> None:
            self.input, self.format = input, format

    assert spark_preparation.input_format(Config("a/b.csv")) == "csv"
    assert spark_preparation.input_format(Config("a/b.jsonl")) == "json"
    assert spark_preparation.input_format(Config("s3://bucket/table/")) == "parquet"
    assert spark_preparation.input_format(Config("a/pictures", "images")) == "images"


# --- what a preparation keeps (no Spark: the folder's two forms, written by hand) ----------------
def _digits(count: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 1, 4, 4), dtype=np.uint8), rng.integers(0, 3, count).astype(np.int64)


def _memory_writer(arrays):
    import numpy as np

    def write(partial):
        for name, (images, labels) in arrays.items():
            np.save(partial / f"{name}_images.npy", images)
            np.save(partial / f"{name}_labels.npy", labels)

    return write


def _stream_writer(arrays):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(partial):
        for name, (images, labels) in arrays.items():
            (partial / name).mkdir()
            for part, begin in enumerate(range(0, len(labels), 4)):  # several files, as Ray Data writes
                rows = slice(begin, begin + 4)
                table = pa.table({"image": [i.tobytes() for i in images[rows]], "label": labels[rows]})
                pq.write_table(table, partial / name / f"{part}.parquet")
        return {"rows": {name: len(labels) for name, (_, labels) in arrays.items()}}

    return write


META = {"classes": ["0", "1", "2"], "mean": [0.5], "std": [0.2], "splits": ["train", "val", "test"]}


def _held_out(tmp_path: Path, folder: Path):
    data = "dataset: spark\nimage_size: 8\nchannels: 1\nspark: {input: 's3://b/t', function: 'p:f'}\n"
    sweep = load_sweep(str(_sweep(tmp_path, data)), import_code=False)
    held = object.__new__(spark.SparkData)  # as the export makes it, without the environment check
    held.config, held.channels, held.size, held.cache = sweep.data, 1, 4, None
    held.keep_in(folder)
    return held


def test_a_streamed_preparation_is_read_back_in_chunks_for_the_tests_score(tmp_path):
    import numpy as np

    arrays = {name: _digits(n, i) for i, (name, n) in enumerate((("train", 10), ("val", 3), ("test", 9)))}
    folder = tmp_path / "spark-data"
    meta = spark.save_prepared(folder, _stream_writer(arrays), {**META, "held": "stream"})
    assert meta["rows"] == {"train": 10, "val": 3, "test": 9}
    splits, kept = spark.load_prepared(folder)
    assert kept["held"] == "stream" and set(splits) == {"train", "val", "test"}
    chunks = list(_held_out(tmp_path, folder).test_chunks())
    assert np.array_equal(np.concatenate([c[0] for c in chunks]), arrays["test"][0])
    assert np.array_equal(np.concatenate([c[1] for c in chunks]), arrays["test"][1])
    assert np.array_equal(_held_out(tmp_path, folder).examples(2), arrays["test"][0][:2])


def test_test_subset_cuts_a_streamed_test_split_across_its_files(tmp_path):
    arrays = {name: _digits(n, i) for i, (name, n) in enumerate((("train", 10), ("val", 3), ("test", 9)))}
    folder = tmp_path / "spark-data"
    spark.save_prepared(folder, _stream_writer(arrays), {**META, "held": "stream"})
    # a sweep file asks for 100 or more; a few here, set past the validation
    held = _held_out(tmp_path, folder)
    held.config = held.config.model_copy(update={"test_subset": 6})
    assert sum(len(labels) for _, labels in held.test_chunks()) == 6


def test_a_preparation_in_the_other_form_is_replaced_whole_and_one_in_the_same_form_is_kept(tmp_path):
    import numpy as np

    first, second = {"train": _digits(5, 1), "val": _digits(2, 2)}, {"train": _digits(5, 3), "val": _digits(2, 4)}
    meta = {**META, "splits": ["train", "val"]}
    folder = tmp_path / "kept"
    spark.save_prepared(folder, _memory_writer(first), {**meta, "held": "memory"})
    # another sweep wrote the same preparation meanwhile: the first one stays
    spark.save_prepared(folder, _memory_writer(second), {**meta, "held": "memory"})
    assert np.array_equal(spark.load_prepared(folder)[0]["train"][0], first["train"][0])
    spark.save_prepared(folder, _stream_writer(second), {**meta, "held": "stream"})
    assert spark.load_prepared(folder)[1]["held"] == "stream"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # no partial or old folder left
    assert not list(folder.glob("*.npy"))


def test_a_write_that_fails_leaves_what_was_kept_and_no_partial_folder(tmp_path):
    meta = {**META, "splits": ["train", "val"], "held": "memory"}
    folder = tmp_path / "kept"
    spark.save_prepared(folder, _memory_writer({"train": _digits(5), "val": _digits(2)}), meta)

    def full_disk(partial):
        (partial / "train").mkdir()
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        spark.save_prepared(folder, full_disk, {**meta, "held": "stream"})
    assert spark.load_prepared(folder)[1]["held"] == "memory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


def test_the_export_reads_a_kept_preparation_without_java_or_the_users_function(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tuner.data.planning import held_out

    folder = tmp_path / "sweep" / "spark-data"
    arrays = {name: _digits(n, i) for i, (name, n) in enumerate((("train", 10), ("val", 3), ("test", 9)))}
    spark.save_prepared(folder, _stream_writer(arrays), {**META, "held": "stream"})
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java; and the function's module is nowhere
    data = "dataset: spark\nimage_size: 8\nchannels: 1\nspark: {input: 's3://b/t', function: 'gone:f'}\n"
    sweep = load_sweep(str(_sweep(tmp_path, data)), import_code=False)
    held = held_out(sweep.data, seed=0, folder=SimpleNamespace(spark_data=folder))
    held.channels, held.size = 1, 4  # the hand-written digits' shape
    assert sum(len(labels) for _, labels in held.test_chunks()) == 9
