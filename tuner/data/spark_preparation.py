"""The data prepared by Spark: read, decoded, labelled, split, its statistics fitted, handed to Ray Data."""

from __future__ import annotations

import re
from typing import Any

from tuner.data.spark_session import function_of
from tuner.errors import TunerError

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


def spark_reason(error: BaseException) -> str:
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
                f"data.spark.function: {config.function} raised {type(error).__name__}: {spark_reason(error)}"
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
        images.append(images_of(batch["image"], channels, size))
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


def images_of(column: Any, channels: int, size: int) -> Any:
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

    return {"image": images_of(batch["image"], channels, size), "label": np.asarray(batch["label"], dtype=np.int64)}


def stream_split(folder: Any, channels: int, size: int, *, shuffle: bool) -> Any:
    """A Ray Data pipeline over a split ``to_parquet`` wrote: read as it is used, in a new
    file order each epoch when ``shuffle``; columns ``image`` (uint8 ``[C, H, W]``) and ``label``."""
    import ray.data

    dataset = ray.data.read_parquet(str(folder))
    if shuffle:
        dataset = dataset.randomize_block_order()
    return dataset.map_batches(_decoded, fn_kwargs={"channels": channels, "size": size}, batch_format="numpy")
