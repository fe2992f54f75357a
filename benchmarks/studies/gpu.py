"""The GPU path, run for real: tuner's sweeps on one GPU against a raw PyTorch loop on it.

Run on a machine with one CUDA GPU where Ray and tuner's dependencies import::

    TUNER_DATA_DIR=DIR python benchmarks/studies/gpu.py   # writes benchmarks/results/gpu-<time>.json

Side by side, on the default light CNN, batch 128, bf16 autocast and channels_last
(what a trial does on a GPU), the same epochs for each:

- ``raw xN``: N hand-written loops at once on the GPU (N = 1, 2, 4), data on the
  device and normalised once, a validation pass per epoch as every trial has;
- ``tuner xN``: ``tuner sweep`` with ``gpus_per_worker`` 1, 0.5 and 0.25, so that
  Ray packs N direct trials on the one GPU, and one TorchTrainer trial (Ray Train,
  NCCL) on a whole GPU.

Throughput is images per second per trial over the epochs after the first (the first
pays for CUDA's start-up and autotuning); ``ratio`` is tuner's against raw's at the
same N. Peak concurrency is read from the sweep's own timeline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]  # benchmarks/studies/gpu.py
EPOCHS = int(os.environ.get("GPU_BENCH_EPOCHS", "4"))
BATCH = 128
LR = 2e-3
MODEL = {"name": "cnn", "conv1": 16, "conv2": 32, "hidden": 128}


def raw_loop(out: Path) -> None:
    """One raw trial: the floor a tuner trial on this GPU is measured against."""
    import torch
    from torch import nn

    from tuner.data.datasets import DATASETS, load_split, normalise, resolve_root, split_indices
    from tuner.models.builtin import MnistCnn

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    full = load_split("mnist", resolve_root(None), True)
    train_idx, val_idx = split_indices(len(full), val_fraction=0.1, train_subset=None, seed=0)
    info = DATASETS["mnist"]

    def on_device(images):
        return normalise(torch.from_numpy(images).to(device), info.mean, info.std)

    train_x, train_y = on_device(full.images[train_idx]), torch.from_numpy(full.labels[train_idx]).to(device)
    val_x, val_y = on_device(full.images[val_idx]), torch.from_numpy(full.labels[val_idx]).to(device)
    options = {k: v for k, v in MODEL.items() if k != "name"}
    model = MnistCnn(1, 10, 28, **options).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    rates, accuracy = [], 0.0
    for _ in range(EPOCHS):
        started = time.perf_counter()
        model.train()
        order = torch.randperm(len(train_y), device=device)
        for begin in range(0, len(order), BATCH):
            index = order[begin : begin + BATCH]
            x = train_x[index].contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            val = val_x.contiguous(memory_format=torch.channels_last)
            correct = sum(
                (model(val[b : b + 1024]).argmax(1) == val_y[b : b + 1024]).sum().item()
                for b in range(0, len(val_y), 1024)
            )
        accuracy = correct / len(val_y)
        rates.append(len(train_y) / (time.perf_counter() - started))
    out.write_text(json.dumps({"images_per_s": rates, "val_accuracy": accuracy}))


def raw_copies(n: int, folder: Path) -> dict:
    outs = [folder / f"raw{n}-{i}.json" for i in range(n)]
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--raw-one", str(out)]) for out in outs]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"raw x{n}: a copy failed")
    wall = time.perf_counter() - started
    runs = [json.loads(out.read_text()) for out in outs]
    per_trial = statistics.mean(statistics.median(r["images_per_s"][1:]) for r in runs)
    return {"per_trial": per_trial, "total": per_trial * n, "wall_s": wall, "val_accuracy": runs[0]["val_accuracy"]}


def tuner_sweep(name: str, folder: Path, *, trials: int, gpus: float, runner: str = "direct", subset=None) -> dict:
    spec = {
        "name": name,
        "output_dir": str(folder / "runs"),
        "data": {"dataset": "mnist", "train_subset": subset},
        "model": MODEL,
        "train": {"epochs": EPOCHS, "batch_size": BATCH, "lr": LR, "amp": True},
        "space": {"params": {"lr": {"loguniform": [1.0e-3, 4.0e-3]}}},
        "searcher": {"name": "random"},
        "scheduler": {"name": "fifo"},
        "trials": {"num_samples": trials},
        "scaling": {"workers": 1, "cpus_per_worker": 2, "use_gpu": "auto", "gpus_per_worker": gpus, "runner": runner},
        "tracking": {"mlflow": {"enabled": False}},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(path)], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    if done.returncode != 0:  # keep going: the other measurements still stand
        return {"error": f"tuner sweep exited {done.returncode}", "wall_s": wall}
    root = folder / "runs" / name
    plan = [line for line in done.stdout.splitlines() if line.strip()][:4]  # the plan: slots, GPUs, data
    files = sorted((root / "history").glob("*.jsonl"))
    histories = [[json.loads(line) for line in path.read_text().splitlines()] for path in files]
    per_trial = statistics.mean(statistics.median(r["images_per_s"] for r in h[1:]) for h in histories)
    running, peak = 0, 0
    events = [json.loads(line) for line in (root / "timeline.jsonl").read_text().splitlines()]
    for event in sorted(events, key=lambda e: e["time"]):
        running += {"start": 1, "end": -1, "error": -1}.get(event["event"], 0)
        peak = max(peak, running)
    return {
        "per_trial": per_trial,
        "total": per_trial * min(trials, peak),
        "wall_s": wall,
        "trials": len(histories),
        "peak_running": peak,
        "best_val_accuracy": max(r["val_accuracy"] for h in histories for r in h),
        "plan": plan,
    }


def _ratio(tuner: dict, raw: dict) -> float | None:
    return tuner["per_trial"] / raw["per_trial"] if "per_trial" in tuner else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_out = REPO / "benchmarks" / "results" / f"gpu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    parser.add_argument("--out", default=str(default_out))
    parser.add_argument("--raw-one", help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help="no GPU: one small CPU sweep, to check the script")
    parser.add_argument("--part", choices=["all", "raw", "tuner"], default="all", help="raw needs no Ray")
    parser.add_argument("--raw", help="with --part tuner: the raw part's result file, for the ratios")
    args = parser.parse_args()
    if args.raw_one:
        return raw_loop(Path(args.raw_one))
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(tuner_sweep("gpu_check", Path(tmp), trials=2, gpus=0.5, subset=1000), indent=1))
        return
    import torch

    result: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "bf16": torch.cuda.is_bf16_supported(),
        "torch": torch.__version__,
        "epochs": EPOCHS,
        "batch_size": BATCH,
    }
    if args.raw:
        result.update({k: v for k, v in json.loads(Path(args.raw).read_text()).items() if k.startswith("raw")})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n, gpus in ((1, 1.0), (2, 0.5), (4, 0.25)):
            if args.part in ("all", "raw"):
                result[f"raw x{n}"] = raw_copies(n, folder)
            if args.part in ("all", "tuner"):
                result[f"tuner x{n}"] = tuner_sweep(f"gpu_x{n}", folder, trials=n, gpus=gpus)
            if f"raw x{n}" in result and f"tuner x{n}" in result:
                result[f"ratio x{n}"] = _ratio(result[f"tuner x{n}"], result[f"raw x{n}"])
            print(json.dumps({k: v for k, v in result.items() if k.endswith(f"x{n}")}, indent=1), flush=True)
        if args.part in ("all", "tuner"):
            trainer = tuner_sweep("gpu_train", folder, trials=1, gpus=1.0, runner="torch_trainer")
            result["tuner torch_trainer x1"] = trainer
            if "raw x1" in result:
                result["ratio torch_trainer x1"] = _ratio(trainer, result["raw x1"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
