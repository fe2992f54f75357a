"""A user's own images end to end, on a real local Ray with a small object store: an
image-folder copy and a Parquet copy of real MNIST images reach the IDX path's accuracy on
the same images; a second sweep reads the decode cache; a set several times larger than
the object store streams through Ray Data (one worker and DDP), and a streamed trial
that fails resumes from its checkpoint."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from integration_helpers import data_root, small_sweep

from tuner.data.datasets import load_split, load_test_split, resolve_root, split_indices
from tuner.driver.sweep import run_sweep
from tuner.folder.records import trial_histories
from tuner.sweepfile.schema import SweepConfig
from tuner.trial.testing import FailOnceAt

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

STORE_BYTES = 80 * 2**20  # the object store of this module's Ray (Ray's minimum is 75 MiB)
SUBSET, SEED = 3000, 0


@pytest.fixture(scope="module")
def small_store_ray():
    import ray

    from tuner.cluster.connect import stop_ray

    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=STORE_BYTES,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        log_to_driver=False,
        # Streaming spills to disk, and Ray refuses to spill once the disk is 95% full
        # (OutOfDiskError), which a shared CI machine's disk has been. Only a disk
        # truly full stops this test now.
        _system_config={"local_fs_capacity_threshold": 1.0},
    )
    yield ray
    stop_ray()  # tuner's own stop: ray.shutdown less its 1 s wait on the monitor


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "decoded-cache"))


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The IDX path's own train/validation images (train_subset 3000, seed 0) and 1,000
    test images, as an image folder (train/, val/, test/) and as Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = resolve_root(str(data_root()))
    full, test = load_split("mnist", root, True), load_test_split("mnist", str(root), download=False)
    train_idx, val_idx = split_indices(len(full), val_fraction=0.1, train_subset=SUBSET, seed=SEED)
    base = tmp_path_factory.mktemp("own")
    splits = {
        "train": (full.images[train_idx, 0], full.labels[train_idx]),
        "val": (full.images[val_idx, 0], full.labels[val_idx]),
        "test": (test.images[:1000, 0], test.labels[:1000]),
    }
    (base / "parquet").mkdir()
    for split, (images, labels) in splits.items():
        encoded = [_png(image) for image in images]
        for i, (data, label) in enumerate(zip(encoded, labels, strict=True)):
            folder = base / "folder" / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:05d}.png").write_bytes(data)
        table = pa.table({"png": encoded, "digit": [str(label) for label in labels]})
        pq.write_table(table, base / "parquet" / f"{split}.parquet")
    return base


def _sweep(tmp_path, name: str, data: dict, **sections) -> SweepConfig:
    sections.setdefault("trials", {"num_samples": 1})
    config = small_sweep(tmp_path, name=name, **sections)
    config["data"] = data
    return SweepConfig.model_validate(config)


def _plan_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("  data "))


def test_image_folder_and_parquet_copies_reach_the_idx_paths_accuracy_and_the_second_sweep_reads_the_cache(
    small_store_ray, digits, tmp_path, capsys
):
    idx = run_sweep(_sweep(tmp_path, "idx", small_sweep(tmp_path)["data"]))
    folder_data = {"dataset": "image_folder", "path": str(digits / "folder"), "channels": 1}
    folder = run_sweep(_sweep(tmp_path, "folder", folder_data))
    first_plan = _plan_line(capsys.readouterr().out.split("sweep folder:")[1])
    parquet_data = {
        "dataset": "parquet",
        "path": str(digits / "parquet"),
        "channels": 1,
        "image_column": "png",
        "label_column": "digit",
    }
    parquet = run_sweep(_sweep(tmp_path, "parquet", parquet_data))
    again = run_sweep(_sweep(tmp_path, "folder", folder_data))
    second_plan = _plan_line(capsys.readouterr().out.split("sweep folder:")[-1])

    # The same 2,700 training and 300 validation images, in memory on every path.
    assert "in memory" in first_plan and "decoded" in first_plan, first_plan
    assert "in memory" in second_plan and "from the cache" in second_plan, second_plan
    scores = {name: o.best["val_accuracy"] for name, o in [("idx", idx), ("folder", folder), ("parquet", parquet)]}
    scores["folder, again"] = again.best["val_accuracy"]
    for score in scores.values():  # two epochs on 2,700 images: about 0.9, trial-to-trial noise about 0.01
        assert abs(score - scores["idx"]) <= 0.04, scores
        assert score > 0.8, scores
    for outcome in (folder, parquet):
        assert outcome.best["test_images"] == 1000 and outcome.best["test_accuracy"] > 0.8
        rows = next(iter(trial_histories(outcome.folder).values()))
        assert [row["epoch"] for row in rows] == [1, 2]
    import yaml

    described = yaml.safe_load((parquet.folder.best / "config.yaml").read_text())["data"]
    assert described["classes"] == [str(d) for d in range(10)] and described["size"] == 28
    assert described["channels"] == 1 and described["num_classes"] == 10
    # The statistics come from a seeded sample of the same images: the same on both copies.
    folder_described = yaml.safe_load((folder.folder.best / "config.yaml").read_text())["data"]
    assert folder_described["mean"] == pytest.approx(described["mean"])
    # The sweep recorded them at its start (the export and a resume read that, not the files).
    recorded = json.loads((folder.folder.root / "data.json").read_text())
    assert recorded == {"data": folder_described, "held": "memory"}
    assert not (idx.folder.root / "data.json").exists()  # built-in sets need no record


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory):
    """24,000 MNIST digits as PNGs, to be decoded at 64x64 RGB: 295 MB, over 3x the
    object store (80 MiB)."""
    root = resolve_root(str(data_root()))
    full = load_split("mnist", root, True)
    base = tmp_path_factory.mktemp("big") / "digits"
    for split, begin, count in (("train", 0, 22_000), ("val", 22_000, 2_000)):
        for i in range(begin, begin + count):
            folder = base / split / str(full.labels[i])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:05d}.png").write_bytes(_png(full.images[i, 0]))
    return base


def test_a_set_several_times_the_object_store_streams_through_ray_data(small_store_ray, big_folder, tmp_path, capsys):
    store = small_store_ray.cluster_resources()["object_store_memory"]
    data = {"dataset": "image_folder", "path": str(big_folder), "image_size": 64, "channels": 3}
    sweep = _sweep(
        tmp_path,
        "big",
        data,
        model={"name": "cnn", "conv1": 4, "conv2": 8, "hidden": 32},
        train={"epochs": 1, "batch_size": 128, "lr": 2e-3},
    )
    outcome = run_sweep(sweep)
    plan = _plan_line(capsys.readouterr().out)

    decoded = 24_000 * 3 * 64 * 64
    assert decoded > 3 * store, (decoded, store)
    assert "streamed with Ray Data" in plan and "0.5 of the" in plan, plan  # chosen by data.streaming: auto
    ((_, rows),) = trial_histories(outcome.folder).items()
    assert [row["epoch"] for row in rows] == [1]
    assert rows[0]["val_accuracy"] > 0.5, rows  # far above chance (0.1) after one pass of a tiny CNN (0.82 measured)
    assert rows[0]["train_images"] == 22_000  # the whole split, through a store a quarter its size
    assert json.loads((outcome.folder.root / "data.json").read_text())["held"] == "stream"
    assert outcome.best["test_images"] == 0 and outcome.best["test_accuracy"] is None  # no test/


@pytest.mark.parametrize("workers", [1, 2])
def test_a_streamed_trial_resumes_from_its_checkpoint_and_ddp_workers_read_their_own_shards(
    small_store_ray, digits, tmp_path, workers
):
    data = {"dataset": "image_folder", "path": str(digits / "folder"), "channels": 1, "streaming": True}
    scaling = {"workers": 1, "runner": "direct"} if workers == 1 else {"workers": 2, "cpus_per_worker": 0.5}
    sweep = _sweep(tmp_path, f"stream{workers}", data, scaling=scaling, trials={"num_samples": 1, "max_failures": 1})
    outcome = run_sweep(sweep, hooks=FailOnceAt(2, tmp_path / "faults"))  # fails once at epoch 2, then retries

    ((trial_id, rows),) = trial_histories(outcome.folder).items()
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows[1]["resumed_from"] == trial_id  # from epoch 1's checkpoint, not from scratch
    assert all(row["world_size"] == workers for row in rows)
    # Each rank trains on its own equal shard: together, the whole training split once per epoch.
    assert all(row["train_images"] == 2700 for row in rows), rows
    assert rows[1]["val_accuracy"] > 0.8 and outcome.best["test_images"] == 1000


def test_ray_datas_parallel_decode_gives_the_same_pixels_in_the_same_order(small_store_ray, digits):
    """Sweeps use it where decoding in the driver would take over 20 s (large sets):
    the same array as decoding here."""
    from tuner.data import sources

    listing = sources.list_image_folder(str(digits / "folder")).splits["train"]
    parallel = sources.decode_in_parallel(listing, 20, 1)  # resized, so the decoder does real work
    assert parallel.shape == (2700, 1, 20, 20)
    assert np.array_equal(parallel, sources.decode(listing, 20, 1))
