"""A Ray Tune function trainable, written as Ray Tune's own quickstart writes one: it
reports with ``tune.report``, saves a checkpoint each epoch and resumes from
``tune.get_checkpoint()``. Nothing in it knows tuner.

    python train.py                                             # Ray Tune alone
    python -m tuner sweep examples/raytune_function/sweep.yaml  # the same function, every record kept

A small convolutional network on MNIST's IDX files from $TUNER_DATA_DIR/MNIST/raw.
"""

import gzip
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from ray import tune
from ray.tune import Checkpoint
from torch import nn

DATA = Path(os.environ.get("TUNER_DATA_DIR", "data")) / "MNIST" / "raw"
EPOCH_SIZE = 2048
TEST_SIZE = 512


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, kernel_size=3)
        self.fc = nn.Linear(192, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 3))
        x = x.view(-1, 192)
        x = self.fc(x)
        return F.log_softmax(x, dim=1)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_mnist():
    images = read_idx(DATA / "train-images-idx3-ubyte.gz")[: EPOCH_SIZE + TEST_SIZE]
    labels = read_idx(DATA / "train-labels-idx1-ubyte.gz")[: EPOCH_SIZE + TEST_SIZE]
    x = (torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1) - 0.1307) / 0.3081
    y = torch.from_numpy(labels.astype(np.int64))
    return x[:EPOCH_SIZE], y[:EPOCH_SIZE], x[EPOCH_SIZE:], y[EPOCH_SIZE:]


def train_mnist(config):
    train_x, train_y, test_x, test_y = load_mnist()
    model = ConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["epoch"]
    for epoch in range(start, 10):
        model.train()
        for begin in range(0, EPOCH_SIZE, 64):
            optimizer.zero_grad()
            F.nll_loss(model(train_x[begin : begin + 64]), train_y[begin : begin + 64]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        with tempfile.TemporaryDirectory() as folder:
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                os.path.join(folder, "checkpoint.pt"),
            )
            tune.report({"mean_accuracy": acc}, checkpoint=Checkpoint.from_directory(folder))


if __name__ == "__main__":
    search_space = {"lr": tune.loguniform(1e-4, 1e-1), "momentum": tune.uniform(0.1, 0.9)}
    tuner = tune.Tuner(
        train_mnist,
        param_space=search_space,
        tune_config=tune.TuneConfig(
            num_samples=6, metric="mean_accuracy", mode="max", scheduler=tune.schedulers.ASHAScheduler(max_t=10)
        ),
    )
    results = tuner.fit()
    print("Best config is:", results.get_best_result().config)
