"""A small ResNet on MNIST with Hugging Face's ``Trainer``, tuned by tuner: the
one line tuner needs is the callback (``callbacks=[TunerCallback()]``), plus
``resume_from_checkpoint`` to resume a retried trial.

Through tuner, as a training function (sweep.yaml: ``trainable: train_resnet:train``) or as
this script (sweep-command.yaml: ``command: ["python", "train_resnet.py", ...]``):

    python -m tuner sweep examples/transformers_trainer/sweep.yaml

The model is Transformers' ``ResNetForImageClassification`` built from a ``ResNetConfig``
(one grey channel, two stages of basic blocks; no pretrained weights, nothing downloaded). It reads MNIST's IDX files
(train-images-idx3-ubyte.gz, ...) from --data, by default $TUNER_DATA_DIR/MNIST/raw.
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
from transformers import (
    EvalPrediction,
    ResNetConfig,
    ResNetForImageClassification,
    Trainer,
    TrainingArguments,
    set_seed,
)

from tuner.integrations.transformers import TunerCallback

DATA = os.path.join(os.environ.get("TUNER_DATA_DIR", "data"), "MNIST", "raw")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format): a magic number giving the dimensions, then the bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class MNISTImages(torch.utils.data.Dataset):
    """Images as the model takes them: ``pixel_values`` [1, 28, 28] and ``labels``."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.pixels = (torch.from_numpy(images.astype(np.float32)).unsqueeze(1) / 255.0 - 0.1307) / 0.3081
        self.labels = torch.from_numpy(labels.astype(np.int64))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixels[index], "labels": self.labels[index]}


def splits(folder: str, count: int) -> tuple[MNISTImages, MNISTImages]:
    """The first ``count`` training images: nine tenths to train on, a tenth to evaluate."""
    images = read_idx(Path(folder) / "train-images-idx3-ubyte.gz")[:count]
    labels = read_idx(Path(folder) / "train-labels-idx1-ubyte.gz")[:count]
    split = count * 9 // 10
    return MNISTImages(images[:split], labels[:split]), MNISTImages(images[split:], labels[split:])


def accuracy(prediction: EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def train(config: dict) -> None:
    """One run with ``config``'s values (a tuner trial's, or the command line's)."""
    set_seed(config.get("seed", 0))
    train_set, val_set = splits(config.get("data", DATA), config.get("train_size", 6000))
    width = config.get("width", 16)
    model = ResNetForImageClassification(
        ResNetConfig(
            num_channels=1,
            embedding_size=width,
            hidden_sizes=[width, 2 * width],
            depths=[1, 1],
            layer_type="basic",
            num_labels=10,
        )
    )
    args = TrainingArguments(
        output_dir=config.get("output_dir", "resnet-mnist"),
        learning_rate=config["lr"],
        warmup_steps=config.get("warmup", 0.1),  # a float: the share of all steps
        weight_decay=config.get("weight_decay", 0.01),
        num_train_epochs=config.get("epochs", 10),
        per_device_train_batch_size=config.get("batch_size", 64),
        per_device_eval_batch_size=256,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        logging_strategy="epoch",
        report_to="none",
        disable_tqdm=True,
        seed=config.get("seed", 0),
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=val_set,
        compute_metrics=accuracy,
        callbacks=[TunerCallback()],  # tuner: each evaluation is a report, with its checkpoint
    )
    trainer.train(resume_from_checkpoint=TunerCallback.resume_from())  # tuner: a retried trial resumes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-size", type=int, default=6000, help="first N training images (the rest unused)")
    parser.add_argument("--output-dir", default="resnet-mnist")
    parser.add_argument("--data", default=DATA)
    train(vars(parser.parse_args()))


if __name__ == "__main__":
    main()
