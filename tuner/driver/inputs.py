"""The data a sweep's trials read, made ready in the driver: a built-in set read, or a
user's own files listed, checked, then decoded into memory (or the cache) or streamed
with Ray Data when they would not fit the object store."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from tuner.data.datasets import TrainingData
from tuner.errors import ConfigError, TunerError
from tuner.folder import records, store
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig


def load_data(sweep: SweepConfig) -> Any:
    """A built-in set, read; a user's own files, listed and checked (decoded once Ray runs).
    An error about the data section names the sweep file and line, as validation's do."""
    from tuner.data.planning import plan

    if not sweep.uses_data:  # a user's function or command without a data section
        return None
    try:
        return plan(sweep.data, seed=sweep.seed)
    except ConfigError as error:
        raise sweep.locate(error) from None


def smallest_object_store() -> float:
    """The smallest alive node's object store: the one copy of an in-memory set must fit
    on any node a trial lands on."""
    import ray

    stores = [node["Resources"].get("object_store_memory", 0) for node in ray.nodes() if node["Alive"]]
    return min(stores) if stores else 0.0


def ready_data(sweep: SweepConfig, planned: Any, folder: SweepFolder, resume: bool, verbose: bool) -> tuple[Any, str]:
    """The data trials read, and how (the plan line's words): in memory, decoded or from
    the cache, or streamed when the decoded set would not fit. A resumed sweep keeps the
    way its first run chose (its searcher, restored by Tune, keeps that run's cap)."""
    from tuner.data.datasets import OwnData
    from tuner.data.spark import SparkData

    if not isinstance(planned, OwnData | SparkData):
        return planned, "in memory"
    from tuner.data import sources

    sources.quiet_ray_data(verbose)
    earlier = records.read_data_description(folder) if resume else None
    store_bytes = smallest_object_store()
    held = None if earlier is None else earlier.get("held") == "stream"
    if isinstance(planned, SparkData):
        planned.keep_in(store.current(folder).spark_data)
        if not planned.prepared:
            from tuner.driver.progress import show

            show(f"preparing {sweep.data.spark.input} with Spark on Ray (RayDP) before the trials ...")
        data, how = planned.ready(
            app_name=f"tuner-{sweep.name}", object_store_bytes=store_bytes, stream=held, verbose=verbose
        )
        spark = (
            f"Spark kept, {planned.kept_cpus} CPU(s) of its executors counted out of the trials'"
            if planned.kept_cpus
            else "Spark stopped before the trials"
        )
        way = "in memory" if isinstance(data, TrainingData) else "streamed with Ray Data from Parquet"
        return data, f"{way} ({how}; {spark})"
    size = f"{planned.decoded_bytes / 2**20:,.0f} MiB decoded"
    share = f"{sweep.data.object_store_share:g} of the {store_bytes / 2**20:,.0f} MiB object store"
    started = time.perf_counter()
    data, decoder = planned.ready(object_store_bytes=store_bytes, stream=held)
    if isinstance(data, TrainingData):
        data = dataclasses.replace(data, test=None)  # trials never read it; the export reads it itself
    if not resume or earlier is None:  # written by driver.sweep once the sweep is built
        planned.record = {
            "data": planned.describe((data.mean, data.std)),
            "held": "memory" if isinstance(data, TrainingData) else "stream",
        }
    if not isinstance(data, TrainingData):
        why = (
            "as its first run"
            if held is not None
            else ("data.streaming: true" if sweep.data.streaming is True else f"{size} > {share}")
        )
        return data, f"streamed with Ray Data ({why})"
    took = time.perf_counter() - started
    how = {"cache": "from the cache", "ray_data": f"decoded with Ray Data in {took:.1f} s"}.get(
        decoder, f"decoded in this process in {took:.1f} s"
    )
    return data, f"in memory ({size}, {how})"


def check_model(sweep: SweepConfig, data: Any) -> None:
    """Build the sweep's model once, on the CPU, with the data's shape (before Ray starts):
    a torchvision option its builder does not take, a weights file that does not fit, or a
    factory that returns something else than a module is one line now, not in every trial."""
    if not sweep.has_model or data is None or sweep.model.name in ("cnn", "resnet18", "resnet34", "synthetic"):
        return
    if data.num_classes is None:  # Spark's data: its classes are known once it has run
        return
    from tuner.models import zoo
    from tuner.models.build import build_model

    options = sweep.model.model_dump(exclude={"name"})
    try:
        model = build_model(
            sweep.model.name,
            in_channels=data.channels,
            num_classes=data.num_classes,
            image_size=data.size,
            options=options,
            code_folder=sweep.code_dir,
        )
        if options.get("weights"):
            zoo.load_weights(model, options["weights"], data.channels)
    except TunerError as error:
        raise sweep.locate(ConfigError(str(error))) from None
    except Exception as error:  # noqa: BLE001 - the builder's own error, as one line
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        field = "model.factory" if sweep.model.name == "factory" else "model.name"
        raise sweep.locate(
            ConfigError(f"{field}: building the model failed: {type(error).__name__}: {reason}")
        ) from None
