"""Write an image folder (the layout tuner's image_folder data set reads) from MNIST's
IDX files, so the example runs on a machine without a network:

    images/train/<class>/<n>.png    images/test/<class>/<n>.png

    python make_images.py --mnist $TUNER_DATA_DIR/MNIST/raw --out images --per-class 200

--mnist is a folder holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (torchvision's MNIST/raw).
Classes are named after the digits (zero, one, ...): predict prints those names.
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
from PIL import Image

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SPLITS = {"train": "train", "test": "t10k"}  # our split: the IDX files' prefix


def read_idx(path: Path) -> np.ndarray:
    """An IDX file: two zero bytes, a type byte, the number of dimensions, their sizes
    (big-endian 32-bit), then the data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\0\0" or data[2] != 0x08:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_split(mnist: Path, out: Path, split: str, per_class: int) -> int:
    prefix = SPLITS[split]
    images = read_idx(mnist / f"{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(mnist / f"{prefix}-labels-idx1-ubyte.gz")
    written = 0
    for digit, name in enumerate(NAMES):
        folder = out / split / name
        folder.mkdir(parents=True, exist_ok=True)
        for n, index in enumerate(np.flatnonzero(labels == digit)[:per_class]):
            Image.fromarray(images[index]).save(folder / f"{n:05d}.png")
            written += 1
    return written


def main() -> None:
    default = Path(os.environ.get("TUNER_DATA_DIR", "data")) / "MNIST" / "raw"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mnist", type=Path, default=default, help=f"MNIST's IDX files (default: {default})")
    parser.add_argument("--out", type=Path, default=Path("images"), help="the image folder to write (default: images)")
    parser.add_argument("--per-class", type=int, default=200, help="training images per class (default: 200)")
    parser.add_argument("--test-per-class", type=int, help="test images per class (default: a quarter of --per-class)")
    args = parser.parse_args()
    if not (args.mnist / "train-images-idx3-ubyte.gz").is_file():
        raise SystemExit(
            f"{args.mnist}: no train-images-idx3-ubyte.gz here; give --mnist the folder of MNIST's .gz files"
        )
    test_per_class = args.test_per_class or max(1, args.per_class // 4)
    train = write_split(args.mnist, args.out, "train", args.per_class)
    test = write_split(args.mnist, args.out, "test", test_per_class)
    print(f"wrote {train} training and {test} test images to {args.out}/")


if __name__ == "__main__":
    main()
