"""Where a GPU trial's step loses to a raw loop's: the step's parts, one at a time.

``studies/gpu.py`` measures tuner's trials against raw loops on a GPU; this script
takes the difference apart in one process, with no Ray: the default light CNN, batch
128, bf16 autocast and channels_last on the MNIST training split, each variant timed
over the same epochs after a warm-up::

    TUNER_DATA_DIR=DIR python benchmarks/studies/gpu_step.py        # one CUDA GPU, ~1 min
    TUNER_DATA_DIR=DIR python benchmarks/studies/gpu_step.py --cpu  # checks the script

Variants (images per second, and the ratio against ``raw``):

- ``raw``: the whole split normalised once on the device, a float32 batch indexed per step;
- ``uint8``: the split kept as uint8 on the device, each batch normalised as it is taken
  (``tuner.data.datasets.normalise``);
- ``uint8+loss``: that, plus the epoch's train loss summed on the device per step in two
  kernels (the trial loop until 2026-11-28);
- ``trial``: tuner's own loop's data and loss sum (``InMemoryData``, which on a GPU
  normalises the split once where it fits, and ``run_training``'s one-kernel sum).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from tuner.data.datasets import DATASETS, Split, TrainingData, load_split, normalise, resolve_root, split_indices
from tuner.models.builtin import MnistCnn
from tuner.trial.loop import InMemoryData

BATCH = 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="no GPU: a few steps on the CPU, to check the script")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu else "cuda")
    full = load_split("mnist", resolve_root(None), True)
    train_idx, val_idx = split_indices(len(full), val_fraction=0.1, train_subset=2000 if args.cpu else None, seed=0)
    info = DATASETS["mnist"]

    train = Split(full.images[train_idx], full.labels[train_idx])
    val = Split(full.images[val_idx], full.labels[val_idx])
    shards = InMemoryData(TrainingData("mnist", train, val, info.mean, info.std, 10, 1, 28), device, 0, 1)
    floats = normalise(shards.train_x, info.mean, info.std)  # raw's one normalised copy
    amp = torch.bfloat16 if device.type == "cuda" else None

    def batches(variant: str, epoch: int):
        if variant == "trial":
            yield from shards.train_batches(0, epoch, BATCH, None)
            return
        order = shards.epoch_indices(0, epoch)
        for begin in range(0, len(order), BATCH):
            index = order[begin : begin + BATCH]
            if variant == "raw":
                yield floats[index], shards.train_y[index]
            else:
                yield normalise(shards.train_x[index], info.mean, info.std), shards.train_y[index]

    def run(variant: str) -> float:
        torch.manual_seed(0)
        model = MnistCnn(1, 10, 28, conv1=16, conv2=32, hidden=128).to(device, memory_format=torch.channels_last)
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
        loss_fn = nn.CrossEntropyLoss()
        rates = []
        for epoch in range(args.epochs + 1):  # the first warms up (CUDA's start, autotuning)
            loss_sum, seen = torch.zeros((), device=device), 0
            started = time.perf_counter()
            for x, y in batches(variant, epoch):
                x = x.contiguous(memory_format=torch.channels_last)
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = loss_fn(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                seen += len(y)
                if variant == "uint8+loss":  # the loop's sum before
                    loss_sum += loss.detach() * len(y)
                elif variant == "trial":
                    loss_sum.add_(loss.detach(), alpha=len(y))
            loss_sum.item()  # waits for the device
            if epoch:
                rates.append(seen / (time.perf_counter() - started))
        return sorted(rates)[len(rates) // 2]

    result = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "torch": torch.__version__}
    for variant in ("raw", "uint8", "uint8+loss", "trial", "raw"):  # raw again: the drift over the run
        rate = run(variant)
        result.setdefault(variant, []).append(round(rate))
        print(f"{variant:12s} {rate:10.0f} images/s  {rate / result['raw'][0]:.3f} x raw", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
