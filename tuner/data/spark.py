"""``data.dataset: spark``: a Spark session on the sweep's own Ray (RayDP) reads and
prepares the data; the trials get it through Ray Data, as they get a user's own files.

The steps, in the driver, once Ray runs (Spark needs it):

1. ``check_environment`` (before Ray starts): pyspark and raydp installed (the ``spark``
   extra), a Java that Spark 3.5 runs on (8, 11 or 17), the user's function importable.
2. ``session``: ``raydp.init_spark`` within ``data.spark.session.start_timeout_s``, with
   the module flags Java 17 needs on the driver, the executors *and* RayDP's app master
   (without them a Java worker dies and Spark hangs instead of failing).
3. ``prepare``: read the input, the user's function, select and decode the image and
   label columns, split (a column, or seeded fractions), per-channel statistics fitted
   on the training split only.
4. The hand-over: each split to Ray Data (RayDP's ``from_spark``), then uint8 arrays in
   memory, kept in tuner's cache for the export and the next sweep on the same input;
   Spark is stopped before the trials start, so its executors hold no CPU they need.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from tuner.errors import TunerError

# Spark 3.5 runs on these Javas (its docs); RayDP's jars are built for 8 and later.
JAVA_VERSIONS = (8, 11, 17)
# What Spark's own launcher adds for Java 17 (JavaModuleOptions), and RayDP's examples pass
# to the driver, the executors and the app master alike.
JAVA_17_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions", "-Djdk.reflect.useDirectMethodHandle=false"]
    + [
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.math",
            "java.text",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ]
)
JAVA_OPTION_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
INSTALL_JAVA = "install Java 17, e.g. apt-get install openjdk-17-jre-headless, or set JAVA_HOME to one"


def java_command() -> str | None:
    """The java Spark will start: $JAVA_HOME's, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_major(version_text: str) -> int | None:
    """The major version in ``java -version``'s output: 'version "1.8.0_392"' -> 8, '"17.0.15"' -> 17."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def check_environment(field: str = "data.dataset") -> int:
    """Before Ray starts: the extra installed and a Java Spark runs on; its major version."""
    missing = [name for name in ("pyspark", "raydp") if importlib.util.find_spec(name) is None]
    if missing:
        raise TunerError(
            f"{field}: 'spark' needs {' and '.join(missing)}, which are not installed; "
            f"pip install 'tuner[spark]' (raydp and a pyspark it supports)"
        )
    java = java_command()
    if java is None:
        raise TunerError(
            f"{field}: 'spark' needs Java {', '.join(map(str, JAVA_VERSIONS))}; none found; {INSTALL_JAVA}"
        )
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise TunerError(f"{field}: 'spark' needs Java, but {java} -version failed ({error}); {INSTALL_JAVA}") from None
    major = java_major(said.stderr + said.stdout)
    if major not in JAVA_VERSIONS:
        found = f"Java {major}" if major else "a Java whose version it could not read"
        raise TunerError(
            f"{field}: Spark 3.5 runs on Java {', '.join(map(str, JAVA_VERSIONS))}, but {java} is {found}; "
            f"{INSTALL_JAVA}"
        )
    return major


def function_of(spec: str, field: str = "data.spark.function") -> Any:
    """``module:function`` imported (from the working folder too), or one line saying why not."""
    module_name, _, name = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - the user's module: any import error, as one line
        raise TunerError(f"{field}: cannot import {module_name!r} ({type(error).__name__}: {error})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise TunerError(f"{field}: {module_name} has no function {name!r}, but got {spec!r}")
    return function


def spark_configs(session: Any, java_major_version: int) -> dict[str, str]:
    """The file's configs, with Java 17's flags added to each Java option the file sets or not."""
    configs = {"spark.python.worker.reuse": "true", "spark.ui.showConsoleProgress": "false", **session.configs}
    configs.setdefault("spark.pyspark.python", sys.executable)  # the executors' Python UDFs: this venv's
    if java_major_version >= 17:
        for key in JAVA_OPTION_KEYS:
            configs[key] = f"{JAVA_17_OPTIONS} {configs.get(key, '')}".strip()
    return configs


@contextlib.contextmanager
def _java_output_to(log: str | None) -> Iterator[None]:
    """While Spark's JVMs start and work, this process's stdout and stderr go to ``log``:
    the JVMs inherit them (log4j writes to both), and their lines go there, not between
    tuner's (None: left as they are)."""
    if log is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(log, "ab") as file:
        for fd in saved:
            os.dup2(file.fileno(), fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def session(config: Any, app_name: str, java_major_version: int, log: str | None = None) -> Iterator[Any]:
    """A Spark session on the running Ray, up within ``start_timeout_s`` (else one line and
    nothing left running); stopped on the way out. ``log``: where the JVMs' output goes."""
    import raydp

    spec = config.session
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["spark"] = raydp.init_spark(
                app_name,
                spec.executors,
                spec.executor_cores,
                spec.executor_memory,
                configs=spark_configs(spec, java_major_version),
            )
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            started["error"] = error

    deadline = time.monotonic() + spec.start_timeout_s
    with _java_output_to(log):
        thread = threading.Thread(target=start, name="tuner-spark-start", daemon=True)
        thread.start()
        thread.join(spec.start_timeout_s)
    # init_spark returns before the executors are up, and a job then waits for them for
    # ever (one asking for more memory than a node has is never placed): wait here, within
    # the same limit.
    while "spark" in started and _executors(started["spark"]) < spec.executors:
        if time.monotonic() > deadline:
            with _java_output_to(log), contextlib.suppress(Exception):
                raydp.stop_spark()
            started.pop("spark")
            break
        time.sleep(0.5)
    if "spark" in started and log is not None:
        with _java_output_to(log):  # log4j says its reconfiguration on the JVM's stderr
            started["spark"].sparkContext.setLogLevel("ERROR")
    if "spark" not in started:
        # No stop_spark here: a failed init_spark has stopped what it began, and one still
        # starting holds RayDP's lock, which RayDP's own exit hook would wait on for ever.
        # What it started is this driver's: it goes when Ray does.
        import atexit

        from raydp import context

        atexit.unregister(context.stop_spark)
        if "error" in started:
            error = started["error"]
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else ""
            where = f"; its output: {log}" if log else ""
            raise TunerError(
                f"data.spark.session: Spark did not start ({type(error).__name__}: {reason}){where}"
            ) from None
        raise TunerError(
            f"data.spark.session.start_timeout_s: Spark was not up after {spec.start_timeout_s:g} s "
            f"({spec.executors} executor(s) of {spec.executor_cores} core(s), {spec.executor_memory}); "
            "a cluster without the CPUs or memory they ask for, or a Java that cannot start"
            + (f"; its output: {log}" if log else "")
        )
    try:
        yield started["spark"]
    finally:
        with _java_output_to(log), contextlib.suppress(Exception):
            raydp.stop_spark()


def _executors(spark: Any) -> int:
    """Executors registered with the session's driver (the driver itself not counted)."""
    try:
        return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    except Exception:  # noqa: BLE001 - a session going away: none
        return 0


# --- preparation ---------------------------------------------------------------------------------
SPLIT_NAMES = ("train", "val", "test")


def input_format(config: Any) -> str:
    """``data.spark.format``, or from the input's name: .csv, .json/.jsonl, else Parquet."""
    if config.format != "auto":
        return config.format
    name = config.input.rstrip("/").lower()
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".json", ".jsonl")):
        return "json"
    return "parquet"


def read(spark: Any, config: Any) -> Any:
    """The input as a DataFrame; ``images``: Spark's binary files, labelled by their folder
    (``DIR/<split>/<class>/*`` or ``DIR/<class>/*``, as an image folder is laid out)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own spelling

    kind = input_format(config)
    try:
        if kind == "images":
            frame = spark.read.format("binaryFile").options(recursiveFileLookup="true", **config.options)
            frame = frame.load(config.input)
            parts = F.split(F.col("path"), "/")
            frame = frame.select(
                F.col("content").alias(config.image_column),
                F.element_at(parts, -2).alias(config.label_column),
                F.element_at(parts, -3).alias("_folder"),
            )
            if config.split_column:
                frame = frame.withColumnRenamed("_folder", config.split_column)
            else:
                frame = frame.drop("_folder")
            return frame
        return spark.read.format(kind).options(**config.options).load(config.input)
    except Exception as error:  # noqa: BLE001 - Spark's AnalysisException: a missing path, a bad file
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TunerError(f"data.spark.input: Spark cannot read {config.input!r} as {kind} ({reason})") from None


def _pixels_udf(size: int, channels: int) -> Any:
    """A Spark pandas UDF: each value (PNG/JPEG bytes, or pixel values in [C, H, W] order)
    to ``channels x size x size`` uint8 bytes. Defined here, pickled by value: an executor
    needs numpy and Pillow, not tuner."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    def one(value: Any) -> bytes:
        import io

        import numpy as np
        from PIL import Image

        if isinstance(value, (bytes, bytearray)):
            try:
                with Image.open(io.BytesIO(value)) as image:
                    image = image.convert("L" if channels == 1 else "RGB")
                    if image.size != (size, size):
                        image = image.resize((size, size), Image.Resampling.BILINEAR)
                    array = np.asarray(image, dtype=np.uint8)
            except Exception as error:  # noqa: BLE001 - Pillow's many errors, as one line
                raise ValueError(
                    f"tuner-spark: an image Pillow cannot read ({type(error).__name__}: {error})"
                ) from None
            return (array[None] if channels == 1 else array.transpose(2, 0, 1)).tobytes()
        array = np.asarray(value, dtype=np.float64)
        if array.size != channels * size * size:
            raise ValueError(
                f"tuner-spark: {array.size} pixel values in a row; data.channels x image_size^2 is "
                f"{channels * size * size}"
            )
        if array.min() < 0 or array.max() > 255:
            raise ValueError(f"tuner-spark: pixel values from {array.min():g} to {array.max():g}; they must be 0-255")
        return np.rint(array).astype(np.uint8).tobytes()

    def pixels(values):  # noqa: ANN001, ANN202 - typed below: pyspark reads real classes, not strings
        return values.map(one)

    pixels.__annotations__ = {"values": pd.Series, "return": pd.Series}
    return pandas_udf(pixels, "binary")


def _spark_reason(error: BaseException) -> str:
    """The line that says what went wrong in an executor's Python (ours start 'tuner-spark: ')."""
    text = str(error)
    ours = re.findall(r"tuner-spark: ([^\n]+)", text)
    if ours:
        return ours[-1].strip()
    python = re.findall(r"\n(\w+(?:Error|Exception): [^\n]+)", text)
    if python:
        return python[-1].strip()
    return (text.strip().splitlines() or [type(error).__name__])[0][:300]


def prepare(spark: Any, config: Any, data: Any, seed: int) -> dict[str, Any]:
    """The prepared splits as DataFrames of ``image`` (uint8 bytes, [C, H, W]) and ``label``
    (class index), with the classes and the training split's per-channel statistics."""
    from pyspark.sql import functions as F  # noqa: N812

    frame = read(spark, config)
    if config.function:
        function = function_of(config.function)
        try:
            frame = function(spark, frame)
        except Exception as error:  # noqa: BLE001 - the user's function, as one line
            raise TunerError(
                f"data.spark.function: {config.function} raised {type(error).__name__}: {_spark_reason(error)}"
            ) from None
        if not hasattr(frame, "columns") or not hasattr(frame, "select"):
            raise TunerError(
                f"data.spark.function: {config.function} must return a Spark DataFrame, but returned "
                f"{type(frame).__name__}"
            )
    columns = list(frame.columns)
    if config.label_column not in columns:
        raise TunerError(
            f"data.spark.label_column: no column {config.label_column!r} in the prepared data "
            f"(columns: {', '.join(columns)})"
        )
    if config.pixel_columns:
        pixel_columns = [c for c in columns if c.startswith(config.pixel_columns)]
        if not pixel_columns:
            raise TunerError(f"data.spark.pixel_columns: no column starts with {config.pixel_columns!r}")
        source = F.array(*[F.col(c) for c in pixel_columns])
    elif config.image_column in columns:
        source = F.col(config.image_column)
    else:
        raise TunerError(
            f"data.spark.image_column: no column {config.image_column!r} in the prepared data "
            f"(columns: {', '.join(columns)}); or name numeric pixel columns with data.spark.pixel_columns"
        )
    classes, index = _classes(frame, config)
    split = F.col(config.split_column) if config.split_column else None
    prepared = frame.select(
        _pixels_udf(data.image_size, data.channels)(source).alias("image"),
        index.alias("label"),
        *([split.alias("_split")] if split is not None else []),
    )
    # Decoded once: the statistics, the row count and each split's hand-over read it again
    # (kept in the executors' memory, spilled to their disk when it does not fit).
    splits = _split(prepared.persist(), config, data, seed)
    if data.train_subset is not None:
        splits["train"] = splits["train"].orderBy(F.rand(seed)).limit(data.train_subset)
    return {"splits": splits, "classes": classes}


def _classes(frame: Any, config: Any) -> tuple[list[str], Any]:
    """The classes (sorted strings, or 0..max for integers) and a column of class indices."""
    from pyspark.sql import functions as F  # noqa: N812

    label = config.label_column
    kind = dict(frame.dtypes)[label]
    found = [row[0] for row in frame.select(label).distinct().collect()]
    if any(value is None for value in found):
        raise TunerError(f"data.spark.label_column: {label!r} has empty values")
    if kind in ("tinyint", "smallint", "int", "bigint"):
        if min(found) < 0:
            raise TunerError(f"data.spark.label_column: {label!r} has a negative class, {min(found)}")
        return [str(k) for k in range(max(found) + 1)], F.col(label).cast("long")
    if kind == "string":
        names = sorted(found)
        mapping = F.create_map(*[item for i, name in enumerate(names) for item in (F.lit(name), F.lit(i))])
        return names, mapping[F.col(label)].cast("long")
    raise TunerError(f"data.spark.label_column: {label!r} is {kind}; it must hold integers or strings")


def _split(prepared: Any, config: Any, data: Any, seed: int) -> dict[str, Any]:
    from pyspark.sql import functions as F  # noqa: N812

    if config.split_column:
        values = {row[0] for row in prepared.select("_split").distinct().collect()}
        unknown = sorted(str(v) for v in values - set(SPLIT_NAMES))
        if unknown or "train" not in values:
            raise TunerError(
                f"data.spark.split_column: {config.split_column!r} holds train, val and test (train at least), "
                f"but got {', '.join(sorted(map(str, values)))}"
            )
        splits = {
            name: prepared.where(F.col("_split") == name).drop("_split") for name in SPLIT_NAMES if name in values
        }
        if "val" not in splits:  # held out of train, as an image folder without val/ is
            train, val = splits["train"].randomSplit([1 - data.val_fraction, data.val_fraction], seed)
            splits.update(train=train, val=val)
        return splits
    test = config.test_fraction
    weights = [1 - data.val_fraction - test, data.val_fraction] + ([test] if test else [])
    if weights[0] <= 0:
        raise TunerError(
            f"data.spark.test_fraction: with data.val_fraction {data.val_fraction:g}, nothing is left to train on"
        )
    parts = prepared.randomSplit(weights, seed)
    return dict(zip(SPLIT_NAMES, parts, strict=False))


def channel_statistics(train: Any, channels: int, size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and std per channel on the 0-1 scale, fitted by Spark on the training split only
    (a partial sum per partition, added up here)."""
    import numpy as np

    def partial(batches: Any) -> Any:
        import numpy as np
        import pandas as pd

        for batch in batches:
            if not len(batch):
                continue
            pixels = np.frombuffer(b"".join(batch["image"]), np.uint8).reshape(len(batch), channels, size * size)
            scaled = pixels.astype(np.float64) / 255.0
            yield pd.DataFrame(
                {
                    "count": [float(len(batch) * size * size)],
                    "total": [scaled.sum(axis=(0, 2)).tolist()],
                    "squares": [(scaled**2).sum(axis=(0, 2)).tolist()],
                }
            )

    rows = train.mapInPandas(partial, "count double, total array<double>, squares array<double>").collect()
    count = sum(row["count"] for row in rows)
    if not count:
        raise TunerError("data.spark: the training split is empty")
    total = np.sum([row["total"] for row in rows], axis=0)
    squares = np.sum([row["squares"] for row in rows], axis=0)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 1e-12))
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def to_arrays(frame: Any, channels: int, size: int) -> tuple[Any, Any]:
    """A prepared split through Ray Data (RayDP's ``from_spark``) into uint8 images
    ``[N, C, H, W]`` and int64 labels."""
    import numpy as np

    dataset = _from_spark(frame)
    images, labels = [], []
    for batch in dataset.iter_batches(batch_size=4096, batch_format="numpy"):
        images.append(_images(batch["image"], channels, size))
        labels.append(np.asarray(batch["label"], dtype=np.int64))
    if not images:
        return np.zeros((0, channels, size, size), np.uint8), np.zeros(0, np.int64)
    return np.concatenate(images), np.concatenate(labels)


def _from_spark(frame: Any) -> Any:
    """RayDP's ``from_spark``, without the deprecation warning pyspark gives it (RayDP
    1.6.5 reads ``DataFrame.sql_ctx``), which would break into tuner's output."""
    import warnings

    import ray.data

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DataFrame.sql_ctx is an internal property")
        return ray.data.from_spark(frame)


def _images(column: Any, channels: int, size: int) -> Any:
    """A column of raw pixel bytes (``prepare``'s ``image``) as uint8 ``[N, C, H, W]``."""
    import numpy as np

    return np.frombuffer(b"".join(column), np.uint8).reshape(-1, channels, size, size)


def to_parquet(frame: Any, folder: Any) -> int:
    """A prepared split through Ray Data (RayDP's ``from_spark``) into Parquet files of raw
    pixel bytes and labels under ``folder``, for the trials to stream; its row count."""

    dataset = _from_spark(frame)
    dataset.write_parquet(str(folder))
    return dataset.count()


def _decoded(batch: dict[str, Any], channels: int, size: int) -> dict[str, Any]:
    import numpy as np

    return {"image": _images(batch["image"], channels, size), "label": np.asarray(batch["label"], dtype=np.int64)}


def stream_split(folder: Any, channels: int, size: int, *, shuffle: bool) -> Any:
    """A Ray Data pipeline over a split ``to_parquet`` wrote: read as it is used, in a new
    file order each epoch when ``shuffle``; columns ``image`` (uint8 ``[C, H, W]``) and ``label``."""
    import ray.data

    dataset = ray.data.read_parquet(str(folder))
    if shuffle:
        dataset = dataset.randomize_block_order()
    return dataset.map_batches(_decoded, fn_kwargs={"channels": channels, "size": size}, batch_format="numpy")


# --- the plan the driver holds, and the prepared splits kept -------------------------------------
SPARK_CACHE_FORMAT = 2  # 2: a prepared set is held in memory (.npy) or streamed (Parquet), meta.json says


def input_identity(path: str) -> list[Any] | None:
    """Every file under a local input (path, size, mtime), or None for a URI or glob: its
    preparation is not cached (what it holds cannot be told cheaply)."""
    from tuner.folder import remote

    if remote.is_remote(path) or any(c in path for c in "*?["):
        return None
    root = os.path.abspath(path)
    files = (
        [root]
        if os.path.isfile(root)
        else sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names)
    )
    return [[f, os.path.getsize(f), os.path.getmtime(f)] for f in files]


def cache_folder(data: Any, seed: int) -> Any:
    """Where the prepared splits of this input and preparation are kept for every sweep;
    None when they cannot be (a URI, a glob or a user's function: what they give may
    change unseen), and the sweep keeps them in its own folder instead."""
    import hashlib
    import json

    from tuner.data.sources import cache_dir

    identity = input_identity(data.spark.input)
    if identity is None or data.spark.function:
        return None
    key = {
        "format": SPARK_CACHE_FORMAT,
        "files": identity,
        "spark": data.spark.model_dump(exclude={"session"}),
        "size": data.image_size,
        "channels": data.channels,
        "val_fraction": data.val_fraction,
        "train_subset": data.train_subset,
        "seed": seed,
    }
    return cache_dir() / "spark" / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def save_prepared(folder: Any, write: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """``write(partial)`` fills a new folder, which then becomes ``folder`` whole (never half
    written). One holding the other form (memory or stream) is replaced; one another sweep
    wrote meanwhile in the same form is kept. What ``write`` returned goes into meta.json."""
    import json

    partial = folder.with_name(f".{folder.name}.partial.{os.getpid()}")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        meta = {**meta, **(write(partial) or {})}
        (partial / "meta.json").write_text(json.dumps(meta) + "\n")
        earlier = load_prepared(folder)
        if earlier is not None and earlier[1]["held"] == meta["held"]:
            shutil.rmtree(partial, ignore_errors=True)
            return earlier[1]
        if folder.exists():  # ours (a cache entry, or this sweep's own copy), the other form
            old = folder.with_name(f".{folder.name}.old.{os.getpid()}")
            os.replace(folder, old)
            os.replace(partial, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return meta


def load_prepared(folder: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """What ``save_prepared`` kept, or None: ``{split: (images, labels)}`` (images
    memory-mapped) when held in memory, ``{split: Parquet folder}`` when streamed."""
    import json

    import numpy as np

    if folder is None or not (folder / "meta.json").is_file():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("held") == "stream":
            splits = {split: folder / split for split in meta["splits"] if (folder / split).is_dir()}
            if len(splits) != len(meta["splits"]):
                return None
            return splits, meta
        arrays = {
            split: (np.load(folder / f"{split}_images.npy", mmap_mode="r"), np.load(folder / f"{split}_labels.npy"))
            for split in meta["splits"]
        }
    except (OSError, ValueError, KeyError):
        return None
    return arrays, meta


class SparkData:
    """``data.dataset: spark`` planned before Ray starts (the environment checked), prepared
    by ``ready`` once Ray runs: Spark started, the splits prepared and handed over, Spark
    stopped (or kept, ``session.keep``). The prepared splits are kept: in tuner's cache for
    a local input (a second sweep on it skips Spark), else in the sweep's own folder
    (``own``), for the export's test score and a resume."""

    def __init__(self, config: Any, seed: int, own: Any = None) -> None:
        self.config, self.seed = config, seed
        self.channels, self.size = config.channels, config.image_size
        self.record: dict | None = None
        self.java = 0
        self.kept_cpus = 0  # a kept session's executors' CPUs, counted out of the trials'
        self.cache = cache_folder(config, seed)
        self.folder = self.cache or own
        if load_prepared(self.folder) is None:
            self.java = check_environment()
            if config.spark.function:
                function_of(config.spark.function)
            identity = input_identity(config.spark.input)
            if identity is not None and not identity:
                raise TunerError(f"data.spark.input: {config.spark.input!r} does not exist or holds no file")

    def keep_in(self, own: Any) -> None:
        """The sweep's own folder for what the cache cannot keep (None: a sweep folder at a URI)."""
        self.folder = self.cache or own

    @property
    def prepared(self) -> bool:
        """Prepared before and kept (a second sweep on the same input, a resume): no Spark."""
        return load_prepared(self.folder) is not None

    @property
    def num_classes(self) -> int | None:
        """Known once prepared (or from what an earlier sweep kept)."""
        kept = load_prepared(self.folder)
        return len(kept[1]["classes"]) if kept else None

    def ready(
        self, *, app_name: str, object_store_bytes: float, stream: bool | None = None, verbose: bool = False
    ) -> tuple[Any, str]:
        """The data the trials read, and how it came: prepared by Spark now, or kept from
        before. In memory when it fits ``data.object_store_share`` of the object store,
        else streamed with Ray Data from Parquet (``stream`` decides instead where given:
        a resumed sweep keeps its first run's way)."""
        started = time.perf_counter()
        kept = load_prepared(self.folder)
        wanted = stream if stream is not None else None if self.config.streaming == "auto" else self.config.streaming
        if kept is not None and wanted is not None and (kept[1]["held"] == "stream") != bool(wanted):
            kept = None  # the other form: prepared again
        if kept is None:
            splits, meta = self._prepare(app_name, object_store_bytes, wanted, verbose)
            how = f"prepared by Spark on Ray in {time.perf_counter() - started:.1f} s"
        else:
            splits, meta = kept
            how = "prepared by Spark earlier, kept"
        if not meta["rows"].get("train") or not meta["rows"].get("val"):
            raise TunerError("data.spark: the training or validation split is empty; see data.val_fraction")
        self.record = {"data": self.describe(meta), "held": meta["held"]}
        return self._data(splits, meta), how

    def _prepare(
        self, app_name: str, object_store_bytes: float, stream: bool | None, verbose: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.folder is None:
            stream = False  # a URI input and a sweep folder at a URI: nowhere to stream from, nothing kept
        if not self.java:  # planned from what was kept, which is now prepared again (in the other form)
            self.java = check_environment()
        log = None if verbose else os.path.join(tempfile.gettempdir(), f"tuner-spark-{os.getpid()}.log")
        spec = self.config.spark.session
        # Spark's JVMs, RayDP and Ray Data say much while they work (log4j, deprecations):
        # into the log too, not between tuner's lines; tuner's own errors are raised, said after.
        with _java_output_to(log), contextlib.ExitStack() as stack:
            spark = stack.enter_context(session(self.config.spark, app_name, self.java, log))
            prepared = prepare(spark, self.config.spark, self.config, self.seed)
            try:
                kept = self._hand_over(prepared, object_store_bytes, stream)
            except TunerError:
                raise
            except Exception as error:  # noqa: BLE001 - a task that failed in an executor
                raise TunerError(f"data.spark: preparing the data failed: {_spark_reason(error)}") from None
            if spec.keep:  # left running (RayDP stops it when the driver exits), its CPUs counted
                stack.pop_all()
                self.kept_cpus = spec.executors * spec.executor_cores
        return kept

    def _hand_over(
        self, prepared: dict[str, Any], object_store_bytes: float, stream: bool | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Statistics fitted, then each split through Ray Data: into memory, or into Parquet
        the trials stream; kept (the folder written whole) where there is a folder."""
        import numpy as np

        frames, channels, size = prepared["splits"], self.channels, self.size
        stats = (
            channel_statistics(frames["train"], channels, size)
            if self.config.spark.standardise
            else ((0.0,) * channels, (1.0,) * channels)
        )
        meta = {"classes": prepared["classes"], "mean": stats[0], "std": stats[1], "splits": list(frames)}
        if stream is None and self.config.streaming != "auto":
            stream = bool(self.config.streaming)
        if stream is None:  # auto: streamed when the decoded set is larger than its share of the store
            rows = frames["train"].count() + frames["val"].count()
            stream = rows * channels * size**2 > self.config.object_store_share * object_store_bytes
        if stream:

            def write_parquet(partial: Any) -> dict[str, Any]:
                return {"rows": {name: to_parquet(frame, partial / name) for name, frame in frames.items()}}

            try:
                meta = save_prepared(self.folder, write_parquet, {**meta, "held": "stream"})
            except OSError as error:
                raise TunerError(
                    f"{self.folder}: the prepared data could not be written for streaming "
                    f"({error.strerror or error}); free space there, or set data.streaming: false"
                ) from None
            kept = load_prepared(self.folder)
            if kept is None:
                raise TunerError(f"{self.folder}: the prepared data were written but cannot be read back")
            return kept
        arrays = {name: to_arrays(frame, channels, size) for name, frame in frames.items()}
        meta.update(held="memory", rows={name: len(labels) for name, (_, labels) in arrays.items()})

        def write_arrays(partial: Any) -> None:
            for name, (images, labels) in arrays.items():
                np.save(partial / f"{name}_images.npy", images)
                np.save(partial / f"{name}_labels.npy", labels)

        if self.folder is not None:
            with contextlib.suppress(OSError):  # no room: the sweep goes on, nothing kept
                save_prepared(self.folder, write_arrays, meta)
        return arrays, meta

    def _data(self, splits: dict[str, Any], meta: dict[str, Any]) -> Any:
        from tuner.data.datasets import Split, StreamedSplit, StreamingData, TrainingData

        common = {
            "dataset": "spark",
            "mean": tuple(meta["mean"]),
            "std": tuple(meta["std"]),
            "num_classes": len(meta["classes"]),
            "channels": self.channels,
            "size": self.size,
            "classes": tuple(meta["classes"]),
        }
        if meta["held"] == "stream":
            train, val = (
                StreamedSplit(
                    stream_split(splits[name], self.channels, self.size, shuffle=name == "train"), meta["rows"][name]
                )
                for name in ("train", "val")
            )
            return StreamingData(train=train, val=val, **common)
        return TrainingData(train=Split(*splits["train"]), val=Split(*splits["val"]), **common)

    def describe(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {
            "dataset": "spark",
            "channels": self.channels,
            "size": self.size,
            "num_classes": len(meta["classes"]),
            "mean": list(meta["mean"]),
            "std": list(meta["std"]),
            "classes": list(meta["classes"]),
        }

    def _rows(self, split: str, count: int | None) -> Iterator[tuple[Any, Any]]:
        """A kept split in chunks of uint8 images and labels, at most ``count`` rows."""
        import numpy as np

        kept = load_prepared(self.folder)
        if kept is None or split not in kept[0]:
            return
        if kept[1]["held"] != "stream":
            images, labels = kept[0][split]
            yield images[:count], labels[:count]
            return
        import pyarrow.parquet as pq

        left = count if count is not None else float("inf")
        for path in sorted(kept[0][split].glob("*.parquet")):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=2048, columns=["image", "label"]):
                if left <= 0:
                    return
                images = _images(
                    batch.column("image").to_pylist()[: int(min(left, batch.num_rows))], self.channels, self.size
                )
                yield images, np.asarray(batch.column("label").to_pylist()[: len(images)], dtype=np.int64)
                left -= len(images)

    def test_chunks(self) -> Iterator[tuple[Any, Any]]:
        """The prepared test split, if the preparation had one (none: no test score)."""
        yield from self._rows("test", self.config.test_subset)

    def examples(self, count: int = 2) -> Any:
        import numpy as np

        kept = load_prepared(self.folder)
        split = "test" if kept and "test" in kept[0] else "val"
        chunks = [images for images, _ in self._rows(split, count)]
        return np.concatenate(chunks) if chunks else np.zeros((0, self.channels, self.size, self.size), np.uint8)
