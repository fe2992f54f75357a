"""A LightningModule small enough to fit in a second (the callback's fast tests, and the
script a test stops with SIGTERM): a linear layer learning the sign of a feature."""

from __future__ import annotations

import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self, sleep: float = 0.0):
        super().__init__()
        self.layer, self.sleep, self.steps = nn.Linear(4, 2), sleep, 0

    def training_step(self, batch, batch_idx):
        time.sleep(self.sleep)
        self.steps += 1
        loss = nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_accuracy", (self.layer(batch[0]).argmax(1) == batch[1]).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def loader() -> DataLoader:
    """64 points in 4 batches; the label is whether the first feature is positive."""
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)


def trainer(callback: L.Callback, max_epochs: int) -> L.Trainer:
    return L.Trainer(
        max_epochs=max_epochs,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
