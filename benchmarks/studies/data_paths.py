"""A user's own images: how fast tuner gets a decoded training set ready, and how fast a
trial trains from memory against streaming, side by side with torchvision's
``ImageFolder`` + ``DataLoader(num_workers=2)`` on the same folder.

    TUNER_DATA_DIR=DIR .venv/bin/python benchmarks/studies/data_paths.py [--images 20000]

It writes an image folder of real MNIST digits (PNG, ``train/<digit>/`` and ``val/``),
then runs each contestant as a child process, one at a time, measuring its wall time and
the peak PSS of its whole process tree (Ray's workers included; ``run.TreeMemory``):

- ``decode_parallel``: ``tuner.data.datasets.OwnData``, listed and header-checked, then decoded
  with Ray Data over the machine's CPUs (a cold cache), as a sweep does;
- ``decode_cached``: the same again: the decode cache answers;
- ``decode_serial``: tuner's decode in one process, no Ray;
- ``imagefolder_dataloader``: ``torchvision.datasets.ImageFolder`` with a ``PILToTensor``
  transform, read once through ``DataLoader(num_workers=2, batch_size=256)`` into one
  uint8 tensor (the baseline);
- ``epochs_in_memory`` / ``epochs_streaming``: ``python -m tuner sweep``, one trial, two
  epochs, on the same folder, with ``data.streaming: false`` / ``true``; the trial's
  training throughput (images/s) at epoch 2.

Prints a table with ratios against the baseline and writes JSON under
``benchmarks/results/<time>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # benchmarks/studies/<this script>
# run.py (measured_child) and contestants/common.py (one_trial_epochs)
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "benchmarks" / "contestants")]
sys.path.insert(0, str(REPO))


# --- the contestants, each in a child process ------------------------------------------------
def _plan(folder: str, cache: str):
    os.environ["TUNER_CACHE_DIR"] = cache
    from tuner.data.config import DataConfig
    from tuner.data.datasets import OwnData

    config = DataConfig(dataset="image_folder", path=folder, channels=1)
    return OwnData.plan(config, seed=0)


def decode_parallel(folder: str, cache: str) -> dict:
    import ray

    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    from tuner.data import sources

    sources.quiet_ray_data()
    started = time.perf_counter()
    plan = _plan(folder, cache)
    listed = time.perf_counter()
    data = plan.in_memory(decoder=sources.decode_in_parallel)  # forced: ready() decodes small sets here
    done = time.perf_counter()
    estimate = plan.serial_decode_s()
    ray.shutdown()
    return {
        "images": len(data.train) + len(data.val),
        "list_check_s": listed - started,
        "ready_s": done - started,
        "serial_estimate_s": estimate,
    }


def decode_cached(folder: str, cache: str) -> dict:
    return decode_parallel(folder, cache)


def decode_serial(folder: str, cache: str) -> dict:
    started = time.perf_counter()
    plan = _plan(folder, cache + "-serial")  # a cache of its own: decode_parallel starts cold
    listed = time.perf_counter()
    data = plan.in_memory()
    done = time.perf_counter()
    return {"images": len(data.train) + len(data.val), "list_check_s": listed - started, "ready_s": done - started}


def imagefolder_dataloader(folder: str, cache: str) -> dict:
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    started = time.perf_counter()
    transform = transforms.Compose([transforms.Grayscale(1), transforms.PILToTensor()])
    parts = [datasets.ImageFolder(str(Path(folder) / split), transform=transform) for split in ("train", "val")]
    images, labels = [], []
    for part in parts:
        for x, y in DataLoader(part, batch_size=256, num_workers=2):
            images.append(x)
            labels.append(y)
    stacked = torch.cat(images)
    done = time.perf_counter()
    return {"images": len(stacked), "list_check_s": 0.0, "ready_s": done - started}


def _epochs(folder: str, cache: str, streaming: bool) -> dict:
    from common import one_trial_epochs

    sweep = {
        "name": "bench",
        "output_dir": str(Path(cache).parent / f"runs-{streaming}"),
        "data": {"dataset": "image_folder", "path": folder, "channels": 1, "streaming": streaming},
        "train": {"epochs": 2},
        "trials": {"num_samples": 1},
        "space": {"params": {"lr": 2e-3}},
    }
    return one_trial_epochs(sweep, Path(cache).parent, {**os.environ, "TUNER_CACHE_DIR": cache})


def epochs_in_memory(folder: str, cache: str) -> dict:
    return _epochs(folder, cache, False)


def epochs_streaming(folder: str, cache: str) -> dict:
    return _epochs(folder, cache, True)


CONTESTANTS = [
    "imagefolder_dataloader",
    "decode_serial",
    "decode_parallel",
    "decode_cached",
    "epochs_in_memory",
    "epochs_streaming",
]


# --- the driver ------------------------------------------------------------------------------
def build_folder(root: Path, count: int) -> None:
    from PIL import Image

    from tuner.data.datasets import load_split, resolve_root

    full = load_split("mnist", resolve_root(None), True)
    n_val = count // 10
    for i in range(count):
        split = "val" if i < n_val else "train"
        folder = root / split / str(full.labels[i])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(full.images[i, 0]).save(folder / f"{i:05d}.png")


def main() -> None:
    from run import measured_child

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = globals()[args.child](args.folder, args.cache)
        Path(args.out).write_text(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="tuner-data-bench-"))
    folder, cache = work / "digits", work / "cache"
    started = time.perf_counter()
    build_folder(folder, args.images)
    print(f"{args.images} PNGs written to {folder} in {time.perf_counter() - started:.1f} s", flush=True)
    results = {}
    for name in CONTESTANTS:
        out = work / f"{name}.json"
        command = [sys.executable, __file__, "--child", name, "--folder", str(folder), "--cache", str(cache)]
        results[name] = measured_child(name, command, out)
    print(table(results, args.images))
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    target = REPO / "benchmarks" / "results" / stamp
    target.mkdir(parents=True, exist_ok=True)
    (target / "data_paths.json").write_text(json.dumps({"images": args.images, "results": results}, indent=2))
    print(f"written: {target / 'data_paths.json'}")


def table(results: dict, images: int) -> str:
    base = results["imagefolder_dataloader"]
    base_rate = images / base["ready_s"]
    lines = [
        f"Getting {images:,} PNGs ready as one uint8 array (baseline: ImageFolder + DataLoader(num_workers=2))",
        "| contestant | ready (s) | images/s | x baseline | peak PSS (MB) |",
        "|---|---|---|---|---|",
    ]
    for name in ("imagefolder_dataloader", "decode_serial", "decode_parallel", "decode_cached"):
        r = results[name]
        rate = images / r["ready_s"]
        lines.append(f"| {name} | {r['ready_s']:.1f} | {rate:,.0f} | {rate / base_rate:.2f} | {r['peak_pss_mb']:.0f} |")
    memory, stream = results["epochs_in_memory"], results["epochs_streaming"]
    lines += [
        "",
        "One trial, epoch 2, same folder (in memory vs streamed with Ray Data)",
        "| path | images/s | x in memory | val accuracy | peak PSS (MB) | wall (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in (("in memory", memory), ("streaming", stream)):
        ratio = r["images_per_s_epoch2"] / memory["images_per_s_epoch2"]
        lines.append(
            f"| {name} | {r['images_per_s_epoch2']:,.0f} | {ratio:.2f} | {r['val_accuracy']:.4f} | "
            f"{r['peak_pss_mb']:.0f} | {r['wall_s']:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
