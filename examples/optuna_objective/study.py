"""An Optuna objective written as Optuna's own PyTorch example writes it
(optuna-examples, pytorch/pytorch_simple.py): a multilayer perceptron on MNIST whose
depth, widths, dropouts, optimizer and learning rate are suggested as the trial runs,
pruned by the intermediate validation accuracy. Nothing in it knows tuner.

    python study.py                                            # Optuna alone, this process
    python -m tuner sweep examples/optuna_objective/sweep.yaml # the same objective on Ray

It reads MNIST's IDX files from $TUNER_DATA_DIR/MNIST/raw (train-images-idx3-ubyte.gz, ...).
"""

import functools
import gzip
import os
from pathlib import Path

import numpy as np
import optuna
import torch
from torch import nn

DATA = Path(os.environ.get("TUNER_DATA_DIR", "data")) / "MNIST" / "raw"
BATCHSIZE = 128
EPOCHS = 5
N_TRAIN_EXAMPLES = 3000
N_VALID_EXAMPLES = 1000


def define_model(trial):
    # We optimize the number of layers, hidden units and dropout ratio in each layer.
    n_layers = trial.suggest_int("n_layers", 1, 3)
    layers = []
    in_features = 28 * 28
    for i in range(n_layers):
        out_features = trial.suggest_int(f"n_units_l{i}", 4, 128, log=True)
        layers.append(nn.Linear(in_features, out_features))
        layers.append(nn.ReLU())
        p = trial.suggest_float(f"dropout_l{i}", 0.2, 0.5)
        layers.append(nn.Dropout(p))
        in_features = out_features
    layers.append(nn.Linear(in_features, 10))
    layers.append(nn.LogSoftmax(dim=1))
    return nn.Sequential(*layers)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


@functools.cache
def get_mnist():
    images = read_idx(DATA / "train-images-idx3-ubyte.gz")
    labels = read_idx(DATA / "train-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    end = N_TRAIN_EXAMPLES + N_VALID_EXAMPLES
    return x[:N_TRAIN_EXAMPLES], y[:N_TRAIN_EXAMPLES], x[N_TRAIN_EXAMPLES:end], y[N_TRAIN_EXAMPLES:end]


def objective(trial):
    # Generate the model.
    model = define_model(trial)

    # Generate the optimizers.
    optimizer_name = trial.suggest_categorical("optimizer", ["Adam", "RMSprop", "SGD"])
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=lr)

    train_x, train_y, valid_x, valid_y = get_mnist()

    # Training of the model.
    for epoch in range(EPOCHS):
        model.train()
        for begin in range(0, len(train_x), BATCHSIZE):
            optimizer.zero_grad()
            output = model(train_x[begin : begin + BATCHSIZE])
            loss = nn.functional.nll_loss(output, train_y[begin : begin + BATCHSIZE])
            loss.backward()
            optimizer.step()

        # Validation of the model.
        model.eval()
        with torch.no_grad():
            pred = model(valid_x).argmax(dim=1)
            accuracy = (pred == valid_y).float().mean().item()

        trial.report(accuracy, epoch)

        # Handle pruning based on the intermediate value.
        if trial.should_prune():
            raise optuna.exceptions.TrialPruned()

    return accuracy


if __name__ == "__main__":
    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=20, timeout=600)
    print(f"Best trial: value {study.best_trial.value}, params {study.best_trial.params}")
