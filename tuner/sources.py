"""A user's own images: an image folder (torchvision's ImageFolder layout) or Parquet files
with an encoded-image column and a label column, decoded once into uint8 ``[N, C, H, W]``.

Everything that can be wrong with the input is found here, before Ray starts, and said
in one line naming the file: a missing folder, an empty class, an unreadable image, a
label column that is missing or neither integer nor string, mixed sizes without
``data.image_size``.

Decoded sets are cached (``$TUNER_CACHE_DIR`` or ``~/.cache/tuner/decoded``) under a key
made of every file's identity (path, size, mtime) and the decode settings, so a second
sweep on the same files does not decode again.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner import store
from tuner.errors import TunerError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
SPLITS = ("train", "val", "test")


@dataclass
class Listing:
    """What is to be decoded for one split: sources (files, or encoded bytes with where
    they came from) and class indices."""

    where: list[str]  # a file, or "<parquet file>:row <n>", for error messages
    labels: np.ndarray  # int64
    files: list[Path] | None = None  # image folder: the files
    encoded: list[bytes] | None = None  # parquet: the encoded images


@dataclass
class Source:
    """A user's data set, listed (not yet decoded): splits present, class names."""

    kind: str  # image_folder or parquet
    path: str
    classes: list[str]
    splits: dict[str, Listing]  # train, and val / test when present

    def identity(self) -> list[Any]:
        """Every input file's path, size and mtime: the cache key's data part."""
        files = sorted({p for listing in self.splits.values() for p in _files_of(listing)})
        return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def _files_of(listing: Listing) -> Iterable[Path]:
    if listing.files is not None:
        return listing.files
    return {Path(where.rsplit(":row ", 1)[0]) for where in listing.where}


# --- image folders ----------------------------------------------------------------------------
def list_image_folder(path: str) -> Source:
    """``DIR/train/<class>/*.png|jpg`` (and optionally ``val/``, ``test/``), checked."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise TunerError(f"data.path: {root} is not a folder")
    if not (root / "train").is_dir():
        raise TunerError(f"data.path: {root} has no train/ folder (expected {root}/train/<class>/<image>)")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise TunerError(f"data.path: {root / 'train'} has no class folders (expected train/<class>/<image>)")
    splits = {}
    for split in SPLITS:
        folder = root / split
        if not folder.is_dir():
            continue
        files: list[Path] = []
        labels: list[int] = []
        for index, name in enumerate(classes):
            images = (
                sorted(p for p in (folder / name).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
                if (folder / name).is_dir()
                else []
            )
            if split == "train" and not images:
                raise TunerError(f"data.path: class folder {folder / name} has no images ({', '.join(IMAGE_SUFFIXES)})")
            files += images
            labels += [index] * len(images)
        unknown = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in classes)
        if unknown:
            raise TunerError(
                f"data.path: {folder} has class folders that train/ lacks: {', '.join(unknown)}; "
                "every class must be in train/"
            )
        splits[split] = Listing([str(f) for f in files], np.asarray(labels, dtype=np.int64), files=files)
    return Source("image_folder", str(root), classes, splits)


# --- parquet --------------------------------------------------------------------------------------
def parquet_files(path: str) -> list[Path]:
    """A file, a folder (its *.parquet, recursively) or a glob."""
    expanded = os.path.expanduser(path)
    if any(ch in expanded for ch in "*?["):
        files = sorted(Path(p) for p in glob.glob(expanded, recursive=True) if Path(p).is_file())
    elif Path(expanded).is_dir():
        files = sorted(p for p in Path(expanded).rglob("*.parquet") if p.is_file())
    else:
        files = [Path(expanded)] if Path(expanded).is_file() else []
    if not files:
        raise TunerError(f"data.path: no Parquet file at {path}")
    return files


def list_parquet(path: str, image_column: str, label_column: str, split_column: str | None = None) -> Source:
    """Parquet rows of encoded images and labels; string labels become sorted class names.

    Files under a ``train/``, ``val/`` or ``test/`` folder (or named so) make those splits;
    the rest are the training split."""
    import pyarrow.parquet as pq

    grouped: dict[str, list[tuple[str, bytes, Any]]] = {}
    for file in parquet_files(path):
        try:
            table = pq.read_table(file)
        except Exception as error:  # pyarrow raises its own types for a bad file
            raise TunerError(f"{file}: not a readable Parquet file ({type(error).__name__})") from None
        for column in (image_column, label_column):
            if column not in table.column_names:
                key = "data.image_column" if column == image_column else "data.label_column"
                raise TunerError(f"{file}: no column {column!r} ({key}); its columns: {', '.join(table.column_names)}")
        images = table.column(image_column).to_pylist()
        labels = table.column(label_column).to_pylist()
        split = _split_of(file)
        rows = grouped.setdefault(split, [])
        for number, (image, label) in enumerate(zip(images, labels, strict=True)):
            if isinstance(image, dict) and "bytes" in image:  # Hugging Face's image struct
                image = image["bytes"]
            if not isinstance(image, (bytes, bytearray)):
                raise TunerError(
                    f"{file}:row {number}: data.image_column {image_column!r} holds {type(image).__name__}, "
                    "not encoded image bytes (PNG/JPEG)"
                )
            if isinstance(label, bool) or not isinstance(label, (int, str)):
                raise TunerError(
                    f"{file}:row {number}: data.label_column {label_column!r} holds {label!r}; labels must be "
                    "integers or strings"
                )
            rows.append((f"{file}:row {number}", bytes(image), label))
    if "train" not in grouped:
        raise TunerError(f"data.path: {path} has no training rows (files under val/ or test/ only)")
    every = [label for rows in grouped.values() for _, _, label in rows]
    if all(isinstance(label, int) for label in every):
        classes = [str(c) for c in range(max(every) + 1)]
        index = {c: c for c in set(every)}
    elif all(isinstance(label, str) for label in every):
        classes = sorted(set(every))
        index = {name: i for i, name in enumerate(classes)}
    else:
        raise TunerError(f"data.label_column {label_column!r} mixes integers and strings in {path}")
    splits = {
        split: Listing(
            [where for where, _, _ in rows],
            np.asarray([index[label] for _, _, label in rows], dtype=np.int64),
            encoded=[data for _, data, _ in rows],
        )
        for split, rows in grouped.items()
    }
    return Source("parquet", path, classes, splits)


def _split_of(file: Path) -> str:
    for part in (file.stem.lower(), *(p.lower() for p in file.parts[:-1])):
        if part in SPLITS:
            return part
    return "train"


# --- checking, before Ray starts ----------------------------------------------------------------
def check(listing: Listing, size: int | None) -> tuple[int, int] | None:
    """Open every image's header (no pixels decoded): an unreadable file, or sizes that
    differ without ``size`` to resize them, is one line naming the file. Returns the
    common (width, height) when there is one."""
    from PIL import Image, UnidentifiedImageError

    items: Sequence[bytes | Path] = listing.files if listing.files is not None else listing.encoded or []
    first: tuple[str, tuple[int, int]] | None = None
    for item, where in zip(items, listing.where, strict=True):
        try:
            with Image.open(io.BytesIO(item) if isinstance(item, bytes) else item) as image:
                dimensions = image.size
        except (UnidentifiedImageError, OSError, ValueError) as error:
            raise TunerError(f"{where}: not a readable image ({type(error).__name__}: {error})") from None
        if first is None:
            first = (where, dimensions)
        elif size is None and dimensions != first[1]:
            raise TunerError(
                f"{where}: {dimensions[0]}x{dimensions[1]} px, but {first[0]} is {first[1][0]}x{first[1][1]}; "
                "set data.image_size to resize them all"
            )
    return None if first is None else first[1]


# --- decoding ------------------------------------------------------------------------------------
def decode_one(data: bytes | Path, where: str, size: int | None, channels: int) -> np.ndarray:
    """One image -> uint8 ``[C, H, W]``: converted to L or RGB, resized to ``size`` if given."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
            image = image.convert("L" if channels == 1 else "RGB")
            if size is not None and image.size != (size, size):
                image = image.resize((size, size), Image.BILINEAR)
            array = np.asarray(image, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise TunerError(f"{where}: not a readable image ({type(error).__name__}: {error})") from None
    return array[None] if channels == 1 else np.ascontiguousarray(array.transpose(2, 0, 1))


def decode(listing: Listing, size: int | None, channels: int) -> np.ndarray:
    """Every image of a split, in order; mixed sizes without ``size`` are an error."""
    items: Sequence[bytes | Path] = listing.files if listing.files is not None else listing.encoded or []
    arrays = [decode_one(item, where, size, channels) for item, where in zip(items, listing.where, strict=True)]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        first = arrays[0].shape
        odd = next(i for i, a in enumerate(arrays) if a.shape != first)
        raise TunerError(
            f"{listing.where[odd]}: {arrays[odd].shape[2]}x{arrays[odd].shape[1]} px, but "
            f"{listing.where[0]} is {first[2]}x{first[1]}; set data.image_size to resize them all"
        )
    if not arrays:
        return np.zeros((0, channels, size or 1, size or 1), dtype=np.uint8)
    return np.stack(arrays)


def decode_in_parallel(listing: Listing, size: int | None, channels: int, batch: int = 256) -> np.ndarray:
    """``decode`` spread over the Ray cluster's CPUs with Ray Data (a running Ray needed):
    batches of files (or encoded bytes) decoded by tasks, put back in their order.

    (Untested WIP: issue 12.)"""
    import ray

    items = listing.files if listing.files is not None else listing.encoded or []
    rows = [{"i": i, "item": str(item) if isinstance(item, Path) else item} for i, item in enumerate(items)]

    def decode_batch(rows: dict[str, Any]) -> dict[str, Any]:
        images = [
            decode_one(item if isinstance(item, bytes) else Path(item), listing.where[int(i)], size, channels)
            for i, item in zip(rows["i"], rows["item"], strict=True)
        ]
        return {"i": rows["i"], "image": np.stack(images)}

    dataset = ray.data.from_items(rows).map_batches(decode_batch, batch_size=batch, batch_format="numpy")
    order: list[np.ndarray] = []
    arrays: list[np.ndarray] = []
    for part in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        order.append(part["i"])
        arrays.append(part["image"])
    if not arrays:
        return np.zeros((0, channels, size or 1, size or 1), dtype=np.uint8)
    images = np.concatenate(arrays)
    return images[np.argsort(np.concatenate(order), kind="stable")]


# --- the cache ------------------------------------------------------------------------------------
def cache_dir() -> Path:
    base = os.environ.get("TUNER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tuner")
    return Path(base) / "decoded"


def cache_key(source: Source, size: int | None, channels: int, extra: dict[str, Any] | None = None) -> str:
    identity = {
        "kind": source.kind,
        "classes": source.classes,
        "files": source.identity(),
        "size": size,
        "channels": channels,
        **(extra or {}),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def decoded(source: Source, size: int | None, channels: int, extra: dict[str, Any] | None = None, decoder: Any = None):
    """``{split: (images, labels)}`` from the cache, else checked, decoded (by ``decoder``:
    ``decode`` here, or ``decode_in_parallel`` on a running Ray) and cached; and whether it
    came from the cache."""
    decoder = decoder or decode
    path = cache_dir() / f"{cache_key(source, size, channels, extra)}.npz"
    if path.is_file():
        try:
            with np.load(path) as saved:
                return {s: (saved[f"{s}_x"], saved[f"{s}_y"]) for s in source.splits}, True
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache entry is decoded again and replaced
    for listing in source.splits.values():  # every header first: a bad file is named before any decoding
        check(listing, size)
    result = {s: (decoder(listing, size, channels), listing.labels) for s, listing in source.splits.items()}
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{s}_{k}": v for s, (x, y) in result.items() for k, v in (("x", x), ("y", y))})
    try:
        store.write_atomic(path, buffer.getvalue())
    except TunerError:
        pass  # no room for the cache: the sweep goes on without it
    return result, False
