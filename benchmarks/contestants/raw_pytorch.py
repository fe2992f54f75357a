"""Raw PyTorch: one training run of the budget's model for its epochs, no tuning framework.

The compute floor for one trial: pre-normalised tensors in memory, the same model,
optimiser, batch size and epochs, evaluated on the validation split every epoch
(as every trial is) and on the test set once at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import Budget, Clock, Tensors, accuracy, build_cnn, contestant_args, train_epoch, write_result


def run_copies(args, clock: Clock) -> None:
    """``--copies N``: N identical runs at once, one per core: the floor for N concurrent trials."""
    outs = [Path(args.out).with_name(f"copy{i}.json") for i in range(args.copies)]
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--budget", args.budget, "--out", str(out), "--threads", str(args.threads)]
        )
        for out in outs
    ]
    if any(p.wait() != 0 for p in processes):
        raise SystemExit("a copy failed")
    copies = [json.loads(out.read_text()) for out in outs]
    write_result(
        args.out,
        copies=copies,
        threads=args.threads,
        epochs_run=sum(c["epochs_run"] for c in copies),
        compute_s=sum(c["compute_s"] for c in copies),
        images_per_s=sum(c["images_per_s"] for c in copies) / len(copies),  # per copy
        best_val_accuracy=max(c["best_val_accuracy"] for c in copies),
        test_accuracy=copies[0]["test_accuracy"],
        inner_wall_s=clock(),
    )


def main() -> None:
    clock = Clock()
    args = contestant_args(__doc__)
    budget = Budget.from_json(args.budget)
    if args.copies > 1:
        return run_copies(args, clock)
    torch.set_num_threads(args.threads)
    torch.manual_seed(budget.seed)
    data = Tensors(budget)
    lr = sorted(budget.lrs)[len(budget.lrs) // 2]
    model = build_cnn(budget)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(budget.seed)
    epochs = []
    for epoch in range(budget.epochs):
        started = time.perf_counter()
        train_epoch(model, optimizer, data.train_x, data.train_y, budget.batch_size, generator)
        val_accuracy = accuracy(model, data.val_x, data.val_y)
        compute_s = time.perf_counter() - started
        epochs.append({"epoch": epoch + 1, "val_accuracy": val_accuracy, "compute_s": compute_s})
        print(f"epoch {epoch + 1}: val {val_accuracy:.4f} in {compute_s:.1f}s", flush=True)
    write_result(
        args.out,
        lr=lr,
        threads=args.threads,
        epochs=epochs,
        epochs_run=len(epochs),
        compute_s=sum(e["compute_s"] for e in epochs),
        images_per_s=len(data.train_y) * len(epochs) / sum(e["compute_s"] for e in epochs),
        best_val_accuracy=max(e["val_accuracy"] for e in epochs),
        test_accuracy=accuracy(model, data.test_x, data.test_y),
        inner_wall_s=clock(),
    )


if __name__ == "__main__":
    main()
