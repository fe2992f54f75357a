"""``data.dataset: spark``: a Spark session on the sweep's own Ray (RayDP) reads and
prepares the data; the trials get it through Ray Data, as they get a user's own files.

The steps, in the driver, once Ray runs (Spark needs it):

1. ``spark_session.check_environment`` (before Ray starts): pyspark and raydp installed
   (the ``spark`` extra), a Java that Spark 3.5 runs on (8, 11 or 17), the user's function
   importable.
2. ``spark_session.session``: ``raydp.init_spark`` within ``data.spark.session.start_timeout_s``,
   with the module flags Java 17 needs on the driver, the executors *and* RayDP's app master
   (without them a Java worker dies and Spark hangs instead of failing).
3. ``spark_preparation.prepare``: read the input, the user's function, select and decode the
   image and label columns, split (a column, or seeded fractions), per-channel statistics
   fitted on the training split only.
4. The hand-over, here (``SparkData``): each split to Ray Data (RayDP's ``from_spark``), then
   uint8 arrays in memory, kept in tuner's cache for the export and the next sweep on the
   same input; Spark is stopped before the trials start, so its executors hold no CPU they need.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from tuner.data.spark_preparation import (
    channel_statistics,
    images_of,
    prepare,
    spark_reason,
    stream_split,
    to_arrays,
    to_parquet,
)
from tuner.data.spark_session import check_environment, function_of, java_output_to, session
from tuner.errors import TunerError

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
        with java_output_to(log), contextlib.ExitStack() as stack:
            spark = stack.enter_context(session(self.config.spark, app_name, self.java, log))
            prepared = prepare(spark, self.config.spark, self.config, self.seed)
            try:
                kept = self._hand_over(prepared, object_store_bytes, stream)
            except TunerError:
                raise
            except Exception as error:  # noqa: BLE001 - a task that failed in an executor
                raise TunerError(f"data.spark: preparing the data failed: {spark_reason(error)}") from None
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
                images = images_of(
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
