"""A PyTorch Lightning MNIST classifier, tuned by tuner: the one line tuner needs is the
callback (``callbacks=[TunerCallback()]``), plus ``ckpt_path`` to resume a retried trial.

Through tuner, as a training function (sweep.yaml: ``trainable: train_mnist:train``) or
as this script (sweep-command.yaml: ``command: ["python", "train_mnist.py", ...]``):

    python -m tuner sweep examples/lightning_mnist/sweep.yaml

It reads MNIST's IDX files (train-images-idx3-ubyte.gz, ...) from --data, by default
$TUNER_DATA_DIR/MNIST/raw.
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from tuner.integrations.lightning import TunerCallback

DATA = os.path.join(os.environ.get("TUNER_DATA_DIR", "data"), "MNIST", "raw")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format): a magic number giving the dimensions, then the bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class MNISTDataModule(L.LightningDataModule):
    """The first ``train_size`` training images, nine tenths to train on and a tenth to validate."""

    def __init__(self, folder: str = DATA, train_size: int = 6000, batch_size: int = 64):
        super().__init__()
        self.folder, self.train_size, self.batch_size = Path(folder), train_size, batch_size

    def setup(self, stage: str) -> None:
        images = read_idx(self.folder / "train-images-idx3-ubyte.gz")[: self.train_size]
        labels = read_idx(self.folder / "train-labels-idx1-ubyte.gz")[: self.train_size]
        x = (torch.from_numpy(images.astype(np.float32)).unsqueeze(1) / 255.0 - 0.1307) / 0.3081
        y = torch.from_numpy(labels.astype(np.int64))
        split = len(x) * 9 // 10
        self.train_set, self.val_set = TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=500)


class MNISTClassifier(L.LightningModule):
    """A small CNN: two convolutions, a hidden layer with dropout, ten logits."""

    def __init__(self, lr: float = 1e-3, hidden: int = 64, dropout: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 7 * 7, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_accuracy", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def train(config: dict) -> None:
    """One run with ``config``'s values (a tuner trial's, or the command line's)."""
    L.seed_everything(config.get("seed", 0), verbose=False)
    data = MNISTDataModule(config.get("data", DATA), config.get("train_size", 6000), config.get("batch_size", 64))
    model = MNISTClassifier(lr=config["lr"], hidden=config.get("hidden", 64), dropout=config.get("dropout", 0.1))
    trainer = L.Trainer(
        max_epochs=config.get("max_epochs", 10),
        callbacks=[TunerCallback()],  # tuner: each validation is a report, with its checkpoint
        logger=False,  # tuner records the metrics (its history, MLflow, TensorBoard)
        enable_checkpointing=False,  # and keeps the checkpoints
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data, ckpt_path=TunerCallback.resume_from())  # tuner: a retried trial resumes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--train-size", type=int, default=6000, help="first N training images (the rest unused)")
    parser.add_argument("--data", default=DATA)
    train(vars(parser.parse_args()))


if __name__ == "__main__":
    main()
