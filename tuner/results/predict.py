"""Offline batch prediction with an exported model, to CSV (no Ray).

Inputs: a data set split (``mnist:test``, ``fashion_mnist:train``, ``cifar10:test``),
a ``.npy`` array of uint8 images (``[N, H, W]`` or ``[N, C, H, W]``), an IDX file
(``*-ubyte`` or ``*-ubyte.gz``), or a folder of PNG/JPEG images (converted to the
model's channels and size).
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuner.data.datasets import DATASETS, _read_idx, load_test_split
from tuner.errors import TunerError
from tuner.folder.store import storage_error, umask
from tuner.results.export import ExportedModel, load_best

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


@dataclass
class Inputs:
    images: np.ndarray  # uint8 [N, C, H, W]
    labels: np.ndarray | None = None
    names: list[str] | None = None


def load_inputs(spec: str, model: ExportedModel) -> Inputs:
    """Resolve ``--data``; shapes must match the model's input."""
    dataset, _, split = spec.partition(":")
    if dataset in DATASETS and split in ("test", "train"):
        part = load_test_split(dataset, None, train=split == "train")
        inputs = Inputs(np.asarray(part.images), np.asarray(part.labels))
    else:
        inputs = _load_path(Path(spec), model)
    data = model.config["data"]
    given = list(inputs.images.shape)
    images = inputs.images[:, None] if inputs.images.ndim == 3 else inputs.images
    expected = (data["channels"], data["size"], data["size"])
    if images.ndim != 4 or tuple(images.shape[1:]) != expected or images.dtype != np.uint8:
        raise TunerError(
            f"{spec}: the model takes uint8 images of shape [N, {', '.join(map(str, expected))}], "
            f"but got {images.dtype} {given}"
        )
    inputs.images = images
    return inputs


def _load_path(path: Path, model: ExportedModel) -> Inputs:
    if path.is_dir():
        return _load_folder(path, model)
    if not path.is_file():
        valid = ", ".join(f"{name}:test" for name in DATASETS)
        raise TunerError(f"--data {path}: no such file or folder, and not a data set split ({valid})")
    if path.suffix == ".npy":
        return Inputs(np.load(path, allow_pickle=False))
    if "ubyte" in path.name:
        return Inputs(_read_idx(path.with_suffix("") if path.suffix == ".gz" else path))
    raise TunerError(f"--data {path}: expected a .npy array, an IDX file or a folder of images")


def _load_folder(folder: Path, model: ExportedModel) -> Inputs:
    from PIL import Image

    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise TunerError(f"--data {folder}: no {'/'.join(IMAGE_SUFFIXES)} images in this folder")
    data = model.config["data"]
    mode = "L" if data["channels"] == 1 else "RGB"
    size = (data["size"], data["size"])
    arrays = []
    for file in files:
        with Image.open(file) as image:
            array = np.asarray(image.convert(mode).resize(size), dtype=np.uint8)
        arrays.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
    return Inputs(np.stack(arrays), names=[p.name for p in files])


def check_output(out: Path) -> None:
    """``--out`` may be new, or a predictions CSV tuner wrote before (replaced); any other
    file is the user's and is refused."""
    if not out.exists():
        return
    try:
        with open(out, newline="") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        header = []
    if not out.is_file() or header[:1] != ["index"] or "predicted" not in header or "confidence" not in header:
        raise TunerError(f"--out {out}: exists and is not a predictions CSV of tuner's; give a new file name")


def predict_to_csv(model_dir: str | Path, spec: str, out: str | Path, *, batch_size: int = 1024) -> dict[str, float]:
    """Write ``index[,file],predicted,predicted_name,confidence[,label]`` rows; returns a short summary."""
    check_output(Path(out))
    model = load_best(model_dir)
    inputs = load_inputs(spec, model)
    total = len(inputs.images)
    started = time.perf_counter()
    classes, confidences = [], []
    for begin in range(0, total, batch_size):
        predicted, confidence = model.predict(inputs.images[begin : begin + batch_size], batch_size=batch_size)
        classes.append(predicted)
        confidences.append(confidence)
        if sys.stderr.isatty():
            print(f"\rpredicted {min(begin + batch_size, total)}/{total} images", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    predicted, confidence = np.concatenate(classes), np.concatenate(confidences)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_csv(out, inputs, predicted, confidence, _class_names(model))
    except OSError as error:
        raise storage_error(out, error) from None
    summary = {"images": total, "seconds": time.perf_counter() - started}
    if inputs.labels is not None:
        summary["accuracy"] = float((predicted == inputs.labels).mean())
    return summary


def _class_names(model: ExportedModel) -> list[str]:
    """What each class index means: recorded in the export (folder names for an image
    folder), else the built-in data set's names."""
    from tuner.data.datasets import CLASS_NAMES

    data = model.config["data"]
    return list(data.get("classes") or CLASS_NAMES.get(data["dataset"], ()))


def _write_csv(out: Path, inputs: Inputs, predicted: np.ndarray, confidence: np.ndarray, names: list[str]) -> None:
    """The CSV in a temporary file beside ``out``, renamed into place when whole."""
    total = len(predicted)
    handle = tempfile.NamedTemporaryFile("w", newline="", dir=out.parent, prefix=f".{out.name}.", delete=False)
    staging = Path(handle.name)
    try:
        with handle:
            os.fchmod(handle.fileno(), 0o666 & ~umask())
            writer = csv.writer(handle)
            header = ["index", *(["file"] if inputs.names else []), "predicted", "predicted_name", "confidence"]
            writer.writerow(header + (["label"] if inputs.labels is not None else []))
            for index in range(total):
                row = [index, *([inputs.names[index]] if inputs.names else []), int(predicted[index])]
                row.append(names[int(predicted[index])] if int(predicted[index]) < len(names) else "")
                row.append(f"{confidence[index]:.6f}")
                if inputs.labels is not None:
                    row.append(int(inputs.labels[index]))
                writer.writerow(row)
        staging.replace(out)
    finally:
        staging.unlink(missing_ok=True)
