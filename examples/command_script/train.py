"""An existing training script, tuned as it is: a small MLP on MNIST.

    python train.py --lr 0.003 --epochs 5 --hidden 128

It reads MNIST's IDX files (train-images-idx3-ubyte.gz, ...) from --data, by default
$TUNER_DATA_DIR/MNIST/raw, and prints one line per epoch. Under tuner the same line is the
trial's report; the few lines marked "tuner" save a checkpoint and resume from one, and do
nothing when the script runs by itself.
"""

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format): a magic number giving the dimensions, then the bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder: Path, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    images = read_idx(folder / "train-images-idx3-ubyte.gz")[:count]
    labels = read_idx(folder / "train-labels-idx1-ubyte.gz")[:count]
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return (x - 0.1307) / 0.3081, torch.from_numpy(labels.astype(np.int64))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-size", type=int, default=12000, help="first N training images (the rest unused)")
    parser.add_argument("--data", default=os.path.join(os.environ.get("TUNER_DATA_DIR", "data"), "MNIST", "raw"))
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = load(Path(args.data), args.train_size)
    split = len(x) * 9 // 10
    train_x, train_y, val_x, val_y = x[:split], y[:split], x[split:], y[split:]
    model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    start = 0
    resume = os.environ.get("TUNER_RESUME_FROM")  # tuner: a retry, a resumed sweep, PBT
    if resume:
        state = torch.load(Path(resume) / "state.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]

    for e in range(start + 1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(train_x))
        for begin in range(0, len(order), args.batch_size):
            batch = order[begin : begin + args.batch_size]
            optimizer.zero_grad()
            loss_fn(model(train_x[batch]), train_y[batch]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(val_x)
            loss = loss_fn(logits, val_y).item()
            acc = (logits.argmax(1) == val_y).float().mean().item()
        if os.environ.get("TUNER_CHECKPOINT_DIR"):  # tuner: this epoch's checkpoint, before its line
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": e}
            torch.save(state, Path(os.environ["TUNER_CHECKPOINT_DIR"]) / "state.pt")
        print(f"epoch {e}: val_accuracy={acc:.4f} loss={loss:.4f}")


if __name__ == "__main__":
    main()
