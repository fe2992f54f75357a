"""MNIST's IDX files as one Parquet table, the input of ``experiments/mnist_spark_asha.yaml``:
``image`` (PNG bytes), ``label`` (0-9) and ``split`` (train or test), a few files per split.

    python examples/spark_mnist/make_parquet.py data/mnist_parquet [--data-root DIR]

The IDX files are read from ``--data-root`` (default: $TUNER_DATA_DIR, else ./data), as
a sweep on ``dataset: mnist`` reads them (downloaded there by torchvision when missing).
A folder that already holds files is refused.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from tuner.data.datasets import load_test_split

ROWS_PER_FILE = 10_000


def png(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a new folder for the Parquet files")
    parser.add_argument("--data-root", default=None, help="where MNIST/raw/*.gz are (default: $TUNER_DATA_DIR)")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        print(f"make_parquet: {args.out} already holds files; give a new folder", file=sys.stderr)
        return 2
    partial = args.out.with_name(f".{args.out.name}.partial")
    partial.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        data = load_test_split("mnist", args.data_root, train=split == "train", download=True)
        for begin in range(0, len(data.labels), ROWS_PER_FILE):
            rows = range(begin, min(begin + ROWS_PER_FILE, len(data.labels)))
            table = pa.table(
                {
                    "image": pa.array([png(data.images[i, 0]) for i in rows], pa.binary()),
                    "label": pa.array(data.labels[begin : rows.stop], pa.int64()),
                    "split": pa.array([split] * len(rows)),
                }
            )
            pq.write_table(table, partial / f"{split}-{begin // ROWS_PER_FILE:02d}.parquet")
        print(f"{split}: {len(data.labels)} images")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():
        args.out.rmdir()  # empty (checked above)
    partial.rename(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
