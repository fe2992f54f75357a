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
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import ConfigError, TunerError
from tuner.folder import cache_root

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
    columns: tuple[str, str] = ("", "")  # parquet: the image and label columns

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
        raise ConfigError(f"data.path: {root} is not a folder")
    if not (root / "train").is_dir():
        raise ConfigError(f"data.path: {root} has no train/ folder (expected {root}/train/<class>/<image>)")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ConfigError(f"data.path: {root / 'train'} has no class folders (expected train/<class>/<image>)")
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
                raise ConfigError(
                    f"data.path: class folder {folder / name} has no images ({', '.join(IMAGE_SUFFIXES)})"
                )
            files += images
            labels += [index] * len(images)
        unknown = sorted(
            p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in classes
        )
        if unknown:
            raise ConfigError(
                f"data.path: {folder} has class folders that train/ lacks: {', '.join(unknown)}; "
                "every class must be in train/"
            )
        if not files:
            raise ConfigError(f"data.path: {folder} has no images; remove it or put {split} images in <class>/ folders")
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
        raise ConfigError(f"data.path: no Parquet file at {path}")
    return files


def list_parquet(path: str, image_column: str, label_column: str) -> Source:
    """Parquet rows of encoded images and labels; string labels become sorted class names.

    Files named ``train*``, ``val*``/``validation*`` or ``test*`` (as Hugging Face names
    them: ``test-00000-of-00001.parquet``), or under such a folder below ``path``, make
    those splits; the rest are the training split."""
    import pyarrow.parquet as pq

    grouped: dict[str, list[tuple[str, bytes, Any]]] = {}
    base = _base_of(path)
    for file in parquet_files(path):
        try:
            names = pq.read_schema(file).names
        except Exception as error:  # pyarrow raises its own types for a bad file
            raise TunerError(f"{file}: not a readable Parquet file ({type(error).__name__})") from None
        for column in (image_column, label_column):
            if column not in names:
                key = "data.image_column" if column == image_column else "data.label_column"
                raise TunerError(f"{file}: no column {column!r} ({key}); its columns: {', '.join(names)}")
        try:
            table = pq.read_table(file, columns=[image_column, label_column])  # only the two columns
        except Exception as error:
            raise TunerError(f"{file}: not a readable Parquet file ({type(error).__name__})") from None
        images = table.column(image_column).to_pylist()
        labels = table.column(label_column).to_pylist()
        split = _split_of(file, base)
        rows = grouped.setdefault(split, [])
        for number, (image, label) in enumerate(zip(images, labels, strict=True)):
            if isinstance(image, dict) and "bytes" in image:  # Hugging Face's image struct
                image = image["bytes"]
            if not isinstance(image, (bytes, bytearray)):
                raise TunerError(
                    f"{file}:row {number}: data.image_column {image_column!r} holds {type(image).__name__}, "
                    "not encoded image bytes (PNG/JPEG)"
                )
            if isinstance(label, bool) or not isinstance(label, (int, str)) or (isinstance(label, int) and label < 0):
                raise TunerError(
                    f"{file}:row {number}: data.label_column {label_column!r} holds {label!r}; labels must be "
                    "integers from 0 or strings"
                )
            rows.append((f"{file}:row {number}", bytes(image), label))
    if not grouped.get("train"):
        raise ConfigError(f"data.path: {path} has no training rows (no rows, or files of val/ or test/ only)")
    for split, rows in grouped.items():
        if not rows:
            raise ConfigError(f"data.path: the {split} files in {path} have no rows")
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
    return Source("parquet", path, classes, splits, (image_column, label_column))


_SPLIT_NAME = re.compile(r"^(train|training|val|valid|validation|test)([-_.]\d.*)?$")  # test-00000-of-00001
_SPLIT_OF = {"training": "train", "valid": "val", "validation": "val"}


def _base_of(path: str) -> Path:
    """The folder that split names are read below: ``path`` itself, a glob's fixed part,
    or a file's folder."""
    expanded = Path(os.path.expanduser(path))
    if any(ch in str(expanded) for ch in "*?["):
        fixed = [part for part in expanded.parts if not any(ch in part for ch in "*?[")]
        return Path(*expanded.parts[: len(fixed)]) if fixed else Path(".")
    return expanded if expanded.is_dir() else expanded.parent


def _split_of(file: Path, base: Path) -> str:
    """The split a file's name says, else its nearest folder below ``base`` says, else train."""
    try:
        below = file.relative_to(base).parts[:-1]
    except ValueError:
        below = ()
    for name in (file.stem, *reversed(below)):
        match = _SPLIT_NAME.match(name.lower())
        if match:
            return _SPLIT_OF.get(match.group(1), match.group(1))
    return "train"


# --- checking, before Ray starts ----------------------------------------------------------------
def check(listing: Listing, size: int | None) -> tuple[int, int] | None:
    """Open every image's header (no pixels decoded): an unreadable file, or sizes that
    differ without ``size`` to resize them, is one line naming the file. Returns the
    common (width, height) when there is one."""
    from PIL import Image, UnidentifiedImageError

    items = _items(listing)
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


def decode(listing: Listing, size: int | None, channels: int, indices: np.ndarray | None = None) -> np.ndarray:
    """Every image of a split (or the chosen ``indices``), in order, in this process; mixed
    sizes without ``size`` are an error."""
    items = _items(listing)
    chosen = range(len(items)) if indices is None else [int(i) for i in indices]
    arrays = [decode_one(items[i], listing.where[i], size, channels) for i in chosen]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        first = arrays[0].shape
        odd = next(i for i, a in enumerate(arrays) if a.shape != first)
        names = [listing.where[i] for i in chosen]
        raise TunerError(
            f"{names[odd]}: {arrays[odd].shape[2]}x{arrays[odd].shape[1]} px, but "
            f"{names[0]} is {first[2]}x{first[1]}; set data.image_size to resize them all"
        )
    if not arrays:
        return np.zeros((0, channels, size or 1, size or 1), dtype=np.uint8)
    return np.stack(arrays)


def _items(listing: Listing) -> Sequence[bytes | Path]:
    return listing.files if listing.files is not None else listing.encoded or []


def rows(listing: Listing, indices: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Ray Data rows for ``listing`` (or the chosen ``indices`` of it): where each image is
    (a path, or its encoded bytes), its name for errors, its label and its position."""
    items = _items(listing)
    chosen = range(len(items)) if indices is None else (int(i) for i in indices)
    return [
        {
            "i": i,
            "item": str(items[i]) if isinstance(items[i], Path) else items[i],
            "where": listing.where[i],
            "label": int(listing.labels[i]),
        }
        for i in chosen
    ]


def decode_batch(batch: dict[str, Any], size: int | None, channels: int) -> dict[str, Any]:
    """A Ray Data batch of rows -> uint8 ``[B, C, H, W]`` images with labels and positions."""
    images = [
        decode_one(item if isinstance(item, bytes) else Path(item), str(where), size, channels)
        for item, where in zip(batch["item"], batch["where"], strict=True)
    ]
    shapes = {image.shape for image in images}
    if len(shapes) > 1:  # check() catches this before Ray starts; a file changed since
        raise TunerError(f"{batch['where'][0]}: images of different sizes; set data.image_size to resize them all")
    return {"i": batch["i"], "image": np.stack(images), "label": np.asarray(batch["label"], dtype=np.int64)}


def _blocks(count: int, rows_per_block: int = 256) -> int:
    return max(1, math.ceil(count / rows_per_block))


def quiet_ray_data(verbose: bool = False) -> None:
    """No progress bars or "Starting execution" lines from Ray Data (they would break into
    tuner's own progress view); ``--verbose`` keeps them."""
    import ray.data

    if verbose:
        return
    context = ray.data.DataContext.get_current()
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "progress bars disabled"
    context.enable_progress_bars = False
    context.print_on_execution_start = False


def _pipeline(listing: Listing, indices: np.ndarray | None, size: int | None, channels: int, shuffle: bool) -> Any:
    """A Ray Data pipeline decoding the chosen images (all, without ``indices``) in tasks:
    columns ``i`` (position in the listing), ``image`` and ``label``."""
    import ray.data

    items = rows(listing, indices)
    dataset = ray.data.from_items(items, override_num_blocks=_blocks(len(items)))
    if shuffle:
        dataset = dataset.randomize_block_order()
    return dataset.map_batches(
        decode_batch, fn_kwargs={"size": size, "channels": channels}, batch_size=256, batch_format="numpy"
    )


def decode_in_parallel(listing: Listing, size: int | None, channels: int) -> np.ndarray:
    """``decode`` spread over the Ray cluster's CPUs with Ray Data (a running Ray needed):
    blocks of files (or encoded bytes) decoded by tasks, put back in their order."""
    if not len(listing.labels):
        return np.zeros((0, channels, size or 1, size or 1), dtype=np.uint8)
    order: list[np.ndarray] = []
    arrays: list[np.ndarray] = []
    for part in _pipeline(listing, None, size, channels, False).iter_batches(batch_size=None, batch_format="numpy"):
        order.append(part["i"])
        arrays.append(part["image"])
    images = np.concatenate(arrays)
    return images[np.argsort(np.concatenate(order), kind="stable")]


def stream(listing: Listing, indices: np.ndarray, size: int | None, channels: int, *, shuffle: bool) -> Any:
    """A Ray Data pipeline of the chosen images, decoded as they are read: only the paths
    (or encoded bytes) are held; each execution (an epoch) decodes again, in a new block
    order when ``shuffle``. Columns: ``image`` (uint8 ``[C, H, W]``) and ``label``."""
    return _pipeline(listing, indices, size, channels, shuffle).select_columns(["image", "label"])


def sample_of(indices: np.ndarray, seed: int, count: int = 4096) -> np.ndarray:
    """A seeded sample of ``indices`` (sorted): the images normalisation statistics come from,
    the same whether the set is decoded in memory or streamed."""
    if len(indices) <= count:
        return np.sort(indices)
    return np.sort(np.random.default_rng(seed).choice(indices, size=count, replace=False))


# --- the cache ------------------------------------------------------------------------------------
CACHE_FORMAT = 2  # a folder of .npy files per decoded set (1 was one .npz)


def cache_dir() -> Path:
    return cache_root() / "decoded"


def cache_key(source: Source, size: int | None, channels: int) -> str:
    identity = {
        "format": CACHE_FORMAT,
        "kind": source.kind,
        "classes": source.classes,
        "files": source.identity(),
        "size": size,
        "channels": channels,
        "columns": list(source.columns),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def cache_path(source: Source, size: int | None, channels: int) -> Path:
    """The folder of one decoded set: ``<split>.npy`` per split, and ``complete`` once all are."""
    return cache_dir() / cache_key(source, size, channels)


def from_cache(
    source: Source, size: int | None, channels: int, splits: Sequence[str] | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """``{split: (images, labels)}`` decoded by an earlier sweep on the same files, or None.
    The images are memory-mapped (read as they are used); the labels are the listing's."""
    folder = cache_path(source, size, channels)
    if not (folder / "complete").is_file():
        return None
    try:
        return {
            s: (np.load(folder / f"{s}.npy", mmap_mode="r"), source.splits[s].labels) for s in (splits or source.splits)
        }
    except (OSError, ValueError):
        return None  # a damaged cache entry is decoded again and replaced


def decode_and_cache(
    source: Source, size: int | None, channels: int, decoder: Any = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every split decoded (by ``decoder``: ``decode`` in this process, or
    ``decode_in_parallel`` on a running Ray) and saved for the next sweep on these files.
    The headers were checked first (``check``)."""
    decoder = decoder or decode
    result = {s: (decoder(listing, size, channels), listing.labels) for s, listing in source.splits.items()}
    folder = cache_path(source, size, channels)
    partial = folder / f".partial.{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for split, (images, _) in result.items():
            with open(partial, "wb") as handle:  # written straight from the array: no copy in memory
                np.save(handle, images)
            os.replace(partial, folder / f"{split}.npy")
        (folder / "complete").write_text(json.dumps({"path": source.path, "splits": list(result)}) + "\n")
    except OSError:
        partial.unlink(missing_ok=True)  # no room for the cache (or no permission): the sweep goes on without it
    return result


def decoded(source: Source, size: int | None, channels: int) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], bool]:
    """``{split: (images, labels)}`` from the cache, else checked, decoded here and cached;
    and whether it came from the cache."""
    cached = from_cache(source, size, channels)
    if cached is not None:
        return cached, True
    for listing in source.splits.values():  # every header first: a bad file is named before any decoding
        check(listing, size)
    return decode_and_cache(source, size, channels), False


def first_size(listing: Listing) -> tuple[int, int]:
    """The first image's (width, height), from its header."""
    from PIL import Image

    item = _items(listing)[0]
    try:
        with Image.open(io.BytesIO(item) if isinstance(item, bytes) else item) as image:
            return image.size
    except OSError as error:
        raise TunerError(f"{listing.where[0]}: not a readable image ({type(error).__name__}: {error})") from None
