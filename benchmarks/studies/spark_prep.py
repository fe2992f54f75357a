"""Spark on Ray (RayDP) against tuner's own decode path: the time and peak memory to get
the full MNIST training set (60,000 digits as PNG bytes in Parquet) ready for the trials.

    TUNER_DATA_DIR=DIR .venv/bin/python benchmarks/studies/spark_prep.py [--images 60000]

Needs the spark extra and Java 17. It writes the Parquet table once (``train.parquet``:
``image`` PNG bytes, ``label``), then runs each contestant as a child process with a cold
cache, measuring wall time and the peak PSS of its whole process tree (``run.TreeMemory``:
Ray's workers and Spark's JVMs included):

- ``tuner_parquet``: ``data.dataset: parquet``, listed, header-checked and decoded in the
  process (what a sweep does with a set this size), no Ray;
- ``spark``: ``data.dataset: spark`` on a local Ray: RayDP starts Spark (1 executor, 1
  core, 1g), which reads, decodes (a pandas UDF), splits and fits the statistics; each
  split through Ray Data into memory; Spark stopped. Ray's own start is in its wall time,
  not in ``ready_s``.

With ``--trials``, one real sweep each (one trial, the default CNN, two epochs on 20,000
of the images) fed three ways: tuner's own decode, Spark into memory, and Spark into
Parquet that the trial streams with Ray Data; the trial's images/s per epoch from its
history, against the first.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # benchmarks/studies/<this script>
# run.py (measured_child) and contestants/common.py (one_trial_epochs)
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "benchmarks" / "contestants")]
sys.path.insert(0, str(REPO))


def tuner_parquet(folder: str, cache: str) -> dict:
    os.environ["TUNER_CACHE_DIR"] = cache
    from tuner.data.config import DataConfig
    from tuner.data.datasets import OwnData

    started = time.perf_counter()
    plan = OwnData.plan(DataConfig(dataset="parquet", path=folder, channels=1), seed=0)
    data = plan.in_memory()
    return {"images": len(data.train) + len(data.val), "ready_s": time.perf_counter() - started}


def spark(folder: str, cache: str) -> dict:
    os.environ["TUNER_CACHE_DIR"] = cache
    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    from tuner.data import sources
    from tuner.data.config import DataConfig
    from tuner.data.spark import SparkData

    sources.quiet_ray_data()
    config = DataConfig(dataset="spark", image_size=28, channels=1, spark={"input": folder})
    started = time.perf_counter()
    store = ray.cluster_resources()["object_store_memory"]
    data, how = SparkData(config, seed=0).ready(app_name="bench", object_store_bytes=store, stream=False)
    ready = time.perf_counter() - started
    ray.shutdown()
    return {"images": len(data.train) + len(data.val), "ready_s": ready, "how": how}


def _epochs(data: dict, cache: str, subset: int) -> dict:
    """One trial (the default CNN, 2 epochs on ``subset`` training images) of a real sweep
    fed from ``data``."""
    from common import one_trial_epochs

    sweep = {
        "name": "bench",
        "output_dir": str(Path(cache).parent / f"runs-{Path(cache).name}"),
        "data": {"image_size": 28, "channels": 1, "train_subset": subset, **data},
        "train": {"epochs": 2},
        "trials": {"num_samples": 1},
        "space": {"params": {"lr": 2e-3}},
        "tracking": {"mlflow": {"enabled": False}},
    }
    env = {**os.environ, "TUNER_CACHE_DIR": cache, "RAY_ADDRESS": ""}
    return one_trial_epochs(sweep, Path(cache).parent, env)


def trials_tuner(folder: str, cache: str) -> dict:
    return _epochs({"dataset": "parquet", "path": folder}, cache, SUBSET)


def trials_spark_memory(folder: str, cache: str) -> dict:
    return _epochs({"dataset": "spark", "streaming": False, "spark": {"input": folder}}, cache, SUBSET)


def trials_spark_stream(folder: str, cache: str) -> dict:
    return _epochs({"dataset": "spark", "streaming": True, "spark": {"input": folder}}, cache, SUBSET)


CONTESTANTS = ("tuner_parquet", "spark")
THROUGHPUT = ("trials_tuner", "trials_spark_memory", "trials_spark_stream")
SUBSET = 20_000  # training images a throughput trial trains on, twice


def build(folder: Path, count: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from tuner.data.datasets import load_test_split

    train = load_test_split("mnist", None, train=True, download=False)

    def png(image: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(image).save(out, format="PNG")
        return out.getvalue()

    folder.mkdir(parents=True)
    images = [png(train.images[i, 0]) for i in range(count)]
    pq.write_table(pa.table({"image": images, "label": train.labels[:count]}), folder / "train.parquet")


def main() -> None:
    from run import measured_child

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=60_000)
    parser.add_argument("--trials", action="store_true", help="also the trials' throughput fed from each path")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.out).write_text(json.dumps(globals()[args.child](args.folder, args.cache)))
        return
    work = Path(tempfile.mkdtemp(prefix="tuner-spark-bench-"))
    folder = work / "mnist"
    started = time.perf_counter()
    build(folder, args.images)
    print(f"{args.images} PNGs in Parquet at {folder} in {time.perf_counter() - started:.1f} s", flush=True)
    results = {}
    for name in CONTESTANTS:
        out = work / f"{name}.json"
        command = [sys.executable, __file__, "--child", name, "--folder", str(folder), "--cache", str(work / name)]
        results[name] = measured_child(name, command, out, env={**os.environ, "RAY_ADDRESS": ""})
    base = results["tuner_parquet"]
    print("\n| path | images | ready (s) | x tuner | wall (s) | peak PSS (MB) |\n|---|---|---|---|---|---|")
    for name, result in results.items():
        print(
            f"| {name} | {result['images']:,} | {result['ready_s']:.1f} | {result['ready_s'] / base['ready_s']:.2f} | "
            f"{result['wall_s']:.1f} | {result['peak_pss_mb']:,.0f} |"
        )
    if not args.trials:
        return
    fed = {}
    for name in THROUGHPUT:
        out = work / f"{name}.json"
        command = [sys.executable, __file__, "--child", name, "--folder", str(folder), "--cache", str(work / name)]
        if subprocess.run([*command, "--out", str(out)]).returncode:
            raise SystemExit(f"{name} failed")
        fed[name] = json.loads(out.read_text())
        print(f"{name}: {json.dumps(fed[name])}", flush=True)
    base = fed["trials_tuner"]["images_per_s_epoch2"]
    print("\n| trial fed from | images/s, epoch 1 | epoch 2 | x tuner's | val accuracy |\n|---|---|---|---|---|")
    for name, result in fed.items():
        print(
            f"| {name} | {result['images_per_s_epoch1']:,.0f} | {result['images_per_s_epoch2']:,.0f} | "
            f"{result['images_per_s_epoch2'] / base:.2f} | {result['val_accuracy']:.4f} |"
        )


if __name__ == "__main__":
    main()
