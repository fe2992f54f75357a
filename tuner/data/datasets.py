"""Data sets as uint8 tensors: read once, split once, normalised per batch on the worker.

MNIST and Fashion-MNIST are read straight from torchvision's folder layout
(``<root>/MNIST/raw/*-ubyte[.gz]``), CIFAR-10 from ``<root>/cifar-10-batches-py``.
Missing files are downloaded with torchvision where the network allows.
"""

from __future__ import annotations

import functools
import gzip
import os
import pickle
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import TunerError


@dataclass(frozen=True)
class DatasetInfo:
    folder: str  # torchvision's folder name under the root
    torchvision_class: str
    channels: int
    size: int
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


DATASETS = {
    "mnist": DatasetInfo("MNIST", "MNIST", 1, 28, 10, (0.1307,), (0.3081,)),
    "fashion_mnist": DatasetInfo("FashionMNIST", "FashionMNIST", 1, 28, 10, (0.2860,), (0.3530,)),
    "cifar10": DatasetInfo(
        "cifar-10-batches-py", "CIFAR10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    ),
    # Random 8x8 images made in memory, for the synthetic trial (tuner/trial/synthetic.py): no files.
    "synthetic": DatasetInfo("", "", 1, 8, 10, (0.5,), (0.2887,)),
}
SYNTHETIC_SIZES = {True: 1_000, False: 200}  # train (before the validation split), test
# What each class index means, as predict and the registered model name them.
CLASS_NAMES = {
    "mnist": tuple(str(digit) for digit in range(10)),
    "fashion_mnist": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    "synthetic": tuple(str(digit) for digit in range(10)),
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
}
IDX_FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass
class Split:
    """Images ``[N, C, H, W]`` uint8 and labels ``[N]`` int64, as numpy (zero-copy in Ray)."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, indices: np.ndarray) -> Split:
        return Split(np.ascontiguousarray(self.images[indices]), np.ascontiguousarray(self.labels[indices]))


@dataclass
class TrainingData:
    """What a trial trains on: train and validation splits plus normalisation."""

    dataset: str
    train: Split
    val: Split
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    channels: int
    size: int
    classes: tuple[str, ...] = ()  # what each class index means (predict and the served model name them)
    test: Split | None = None  # a user's own test split, when the data has one


def resolve_root(root: str | None) -> Path:
    """``root`` if given, else ``$TUNER_DATA_DIR``, else ``./data``."""
    return Path(root or os.environ.get("TUNER_DATA_DIR") or "data").expanduser().resolve()


def _read_idx(stem: Path) -> np.ndarray:
    """Read an IDX file (``stem`` or ``stem.gz``) into a numpy array."""
    gz = stem.with_name(stem.name + ".gz")
    path = gz if gz.is_file() else stem
    try:
        with gzip.open(path, "rb") if path is gz else open(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:  # a cut-short .gz is EOFError, a foreign one BadGzipFile
        raise TunerError(f"{path}: not a readable IDX file ({type(error).__name__}: {error})") from None
    magic = int.from_bytes(raw[0:4], "big")
    if len(raw) < 4 or magic >> 8 != 0x08:  # 0x08 = unsigned byte data
        raise TunerError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = 4 + 4 * ndim + int(np.prod(shape))
    if len(raw) != expected:
        raise TunerError(
            f"{path}: a truncated or corrupt IDX file (its header says {expected} bytes for shape "
            f"{list(shape)}, but it has {len(raw)})"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _files_present(name: str, root: Path) -> bool:
    info = DATASETS[name]
    if name == "synthetic":
        return True
    if name == "cifar10":
        return (root / info.folder / "test_batch").is_file()
    raw = root / info.folder / "raw"
    return all((raw / f).is_file() or (raw / f"{f}.gz").is_file() for pair in IDX_FILES.values() for f in pair)


def _download(name: str, root: Path) -> None:
    import torchvision.datasets

    cls = getattr(torchvision.datasets, DATASETS[name].torchvision_class)
    for train in (True, False):
        cls(str(root), train=train, download=True)


def _missing_error(name: str, root: Path, why: str) -> TunerError:
    where = root / DATASETS[name].folder
    return TunerError(
        f"data set {name!r} not found in {where} ({why}); put torchvision's files there "
        f"(e.g. {DATASETS[name].folder}/raw/*.gz), or point data.root / TUNER_DATA_DIR at a folder that has them"
    )


def ensure_available(name: str, root: Path, *, download: bool) -> None:
    """Raise one clear TunerError if the files are missing and cannot be downloaded."""
    if _files_present(name, root):
        return
    if not download:
        raise _missing_error(name, root, "download is off")
    created = [p for p in (root, root / DATASETS[name].folder) if not p.exists()]
    try:
        _download(name, root)
    except Exception as error:  # noqa: BLE001 - any network/IO failure means "not available"
        for folder in reversed(created):  # leave no empty folders behind
            shutil.rmtree(folder, ignore_errors=True)
        raise _missing_error(name, root, f"download failed: {type(error).__name__}") from None
    if not _files_present(name, root):
        raise _missing_error(name, root, "download left no files")


@functools.lru_cache(maxsize=4)
def load_split(name: str, root: Path, train: bool) -> Split:
    """The full train or test split of a data set, read once per process."""
    info = DATASETS[name]
    if name == "synthetic":
        rng = np.random.default_rng(int(train))
        count = SYNTHETIC_SIZES[train]
        images = rng.integers(0, 256, (count, info.channels, info.size, info.size), dtype=np.uint8)
        return Split(images, rng.integers(0, info.num_classes, count).astype(np.int64))
    if name == "cifar10":
        return _read_cifar(root / info.folder, train)
    raw = root / info.folder / "raw"
    images_file, labels_file = IDX_FILES[train]
    images = _read_idx(raw / images_file)
    labels = _read_idx(raw / labels_file).astype(np.int64)
    return Split(images.reshape(len(images), 1, info.size, info.size), labels)


def _read_cifar(folder: Path, train: bool) -> Split:
    names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    images, labels = [], []
    for batch_name in names:
        with open(folder / batch_name, "rb") as handle:
            batch = pickle.load(handle, encoding="latin1")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch["labels"], dtype=np.int64))
    return Split(np.concatenate(images), np.concatenate(labels))


def split_indices(n: int, *, val_fraction: float, train_subset: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (train, validation) indices into a training set of ``n`` images (seeded)."""
    order = np.random.default_rng(seed).permutation(n)
    if train_subset is not None:
        order = order[: min(train_subset, n)]
    n_val = max(1, int(round(len(order) * val_fraction)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def load_training_data(
    name: str, root: str | None, *, val_fraction: float, train_subset: int | None, seed: int, download: bool = True
) -> TrainingData:
    """Train/validation split of the training set (seeded); the test set stays untouched."""
    path = resolve_root(root)
    ensure_available(name, path, download=download)
    full = load_split(name, path, True)
    train, val = split_indices(len(full), val_fraction=val_fraction, train_subset=train_subset, seed=seed)
    info = DATASETS[name]
    return TrainingData(
        dataset=name,
        train=full.take(train),
        val=full.take(val),
        mean=info.mean,
        std=info.std,
        num_classes=info.num_classes,
        channels=info.channels,
        size=info.size,
        classes=CLASS_NAMES[name],
    )


def load_data(config, *, seed: int) -> TrainingData:
    """The training data a sweep's ``data`` section names, in memory: a built-in set, or
    the user's own image folder or Parquet files (tuner/data/sources.py) decoded in this
    process (or read from the cache)."""
    plan = plan_data(config, seed=seed)
    return plan if isinstance(plan, TrainingData) else plan.in_memory()


def plan_data(config, *, seed: int) -> TrainingData | OwnData:
    """Before Ray starts: a built-in set, read; or the user's own files, listed and their
    headers checked (a bad file is one line naming it), decoded later by ``OwnData.ready``."""
    if config.dataset in DATASETS:
        return load_training_data(
            config.dataset,
            config.root,
            val_fraction=config.val_fraction,
            train_subset=config.train_subset,
            seed=seed,
            download=config.download,
        )
    return OwnData.plan(config, seed=seed)


@dataclass
class StreamedSplit:
    """A split read through a Ray Data pipeline (``tuner.data.sources.stream``), never held whole."""

    dataset: Any  # ray.data.Dataset of image (uint8 [C, H, W]) and label
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass
class StreamingData:
    """What a trial trains on when the decoded set would not fit the object store: the
    same fields as ``TrainingData``, with splits that stream."""

    dataset: str
    train: StreamedSplit
    val: StreamedSplit
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    channels: int
    size: int
    classes: tuple[str, ...] = ()
    test: None = None  # the export reads a test split itself, in chunks


# Decoding is spread over the cluster with Ray Data when it would take longer than this in
# the driver: Ray Data's first run costs about 6 s of worker start-up and imports, and on
# small images its per-block overhead exceeds the decoding (benchmarks/studies/data_paths.py).
PARALLEL_DECODE_ABOVE_S = 20.0


@dataclass
class OwnData:
    """A user's image folder or Parquet files: listed and checked, not yet decoded."""

    config: Any
    seed: int
    source: Any  # tuner.data.sources.Source
    train: tuple[str, np.ndarray]  # (split of the source, indices into it)
    val: tuple[str, np.ndarray]
    channels: int
    size: int
    cached: bool  # an earlier sweep decoded these files: no header check, no decoding
    record: dict | None = None  # what the sweep records of them (tuner.folder.records.write_data_description)

    @property
    def num_classes(self) -> int:
        return len(self.source.classes)

    @classmethod
    def plan(cls, config, *, seed: int, check: bool = True) -> OwnData:
        from tuner.data import sources

        if config.dataset == "image_folder":
            source = sources.list_image_folder(config.path)
        else:
            source = sources.list_parquet(config.path, config.image_column, config.label_column)
        cached = (sources.cache_path(source, config.image_size, config.channels) / "complete").is_file()
        if check and not cached:
            for listing in source.splits.values():  # every header: a bad file is named before Ray starts
                sources.check(listing, config.image_size)
        width, height = (config.image_size,) * 2 if config.image_size else sources.first_size(source.splits["train"])
        if width != height:
            raise TunerError(
                f"{source.splits['train'].where[0]}: {width}x{height} px is not square; set data.image_size "
                "to resize every image to image_size x image_size"
            )
        count = len(source.splits["train"].labels)
        if "val" in source.splits:
            indices = np.arange(count)
            if config.train_subset is not None:
                indices = np.sort(np.random.default_rng(seed).permutation(count)[: config.train_subset])
            train, val = ("train", indices), ("val", np.arange(len(source.splits["val"].labels)))
        else:
            train_idx, val_idx = split_indices(
                count, val_fraction=config.val_fraction, train_subset=config.train_subset, seed=seed
            )
            train, val = ("train", train_idx), ("train", val_idx)
        return cls(config, seed, source, train, val, config.channels, width, cached)

    @property
    def decoded_bytes(self) -> int:
        """The training and validation images' size once decoded (uint8)."""
        return (len(self.train[1]) + len(self.val[1])) * self.channels * self.size * self.size

    def streams(self, object_store_bytes: float) -> bool:
        """``data.streaming``: true, false, or auto: when the decoded set is larger than
        ``data.object_store_share`` of the object store."""
        if self.config.streaming != "auto":
            return bool(self.config.streaming)
        return self.decoded_bytes > self.config.object_store_share * object_store_bytes

    def ready(
        self, *, object_store_bytes: float, stream: bool | None = None
    ) -> tuple[TrainingData | StreamingData, str]:
        """On a running Ray: into memory (from the cache, decoded here, or decoded with Ray
        Data over the cluster when that would take long here), or a streaming pipeline when
        the decoded set would not fit (``stream`` decides instead where given); and which of
        ``cache``, ``here``, ``ray_data`` or ``stream`` it was."""
        from tuner.data import sources

        if self.streams(object_store_bytes) if stream is None else stream:
            return self.streaming(), "stream"
        if self.cached:
            return self.in_memory(), "cache"
        if self.serial_decode_s() > PARALLEL_DECODE_ABOVE_S:
            return self.in_memory(decoder=sources.decode_in_parallel), "ray_data"
        return self.in_memory(), "here"

    def serial_decode_s(self, sample: int = 64) -> float:
        """About how long decoding every image in this process would take, timed on a few
        spread over the training split."""
        from tuner.data import sources

        listing = self.source.splits["train"]
        count = sum(len(listing.labels) for listing in self.source.splits.values())
        indices = np.linspace(0, len(listing.labels) - 1, num=min(sample, len(listing.labels))).astype(int)
        started = time.perf_counter()
        sources.decode(listing, self.config.image_size, self.channels, indices)
        return (time.perf_counter() - started) / len(indices) * count

    def in_memory(self, decoder: Any = None) -> TrainingData:
        from tuner.data import sources

        splits = sources.from_cache(self.source, self.config.image_size, self.channels)
        if splits is None:
            splits = sources.decode_and_cache(self.source, self.config.image_size, self.channels, decoder)
        train = Split(*splits[self.train[0]]).take(self.train[1])
        val = Split(*splits[self.val[0]]).take(self.val[1])
        sample = sources.sample_of(np.arange(len(train)), self.seed)
        mean, std = channel_stats(train.images[sample])
        return TrainingData(
            dataset=self.config.dataset,
            train=train,
            val=val,
            mean=mean,
            std=std,
            num_classes=len(self.source.classes),
            channels=self.channels,
            size=self.size,
            classes=tuple(self.source.classes),
            test=Split(*splits["test"]) if "test" in splits else None,
        )

    def streaming(self) -> StreamingData:
        from tuner.data import sources

        size, channels = self.config.image_size, self.channels
        train_listing, val_listing = self.source.splits[self.train[0]], self.source.splits[self.val[0]]
        mean, std = self.stats()
        return StreamingData(
            dataset=self.config.dataset,
            train=StreamedSplit(
                sources.stream(train_listing, self.train[1], size, channels, shuffle=True), len(self.train[1])
            ),
            val=StreamedSplit(
                sources.stream(val_listing, self.val[1], size, channels, shuffle=False), len(self.val[1])
            ),
            mean=mean,
            std=std,
            num_classes=len(self.source.classes),
            channels=channels,
            size=self.size,
            classes=tuple(self.source.classes),
        )

    def stats(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Normalisation statistics from a seeded sample of the training images: the same
        sample, so the same figures, in memory and streamed."""
        from tuner.data import sources

        positions = sources.sample_of(np.arange(len(self.train[1])), self.seed)
        cached = sources.from_cache(self.source, self.config.image_size, self.channels, [self.train[0]])
        if cached is not None:  # memory-mapped: only the sample is read
            images = np.asarray(cached[self.train[0]][0][self.train[1][positions]])
        else:
            listing = self.source.splits[self.train[0]]
            images = sources.decode(listing, self.config.image_size, self.channels, self.train[1][positions])
        return channel_stats(images)

    def describe(self, mean_std: tuple[tuple[float, ...], tuple[float, ...]] | None = None) -> dict:
        mean, std = mean_std or self.stats()
        return {
            "dataset": self.config.dataset,
            "channels": self.channels,
            "size": self.size,
            "num_classes": len(self.source.classes),
            "mean": list(mean),
            "std": list(std),
            "classes": list(self.source.classes),
        }

    def test_chunks(self, chunk: int = 1000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The ``test/`` split (its first ``data.test_subset`` images) in chunks, from the cache,
        else decoded here a chunk at a time."""
        from tuner.data import sources

        listing = self.source.splits.get("test")
        if listing is None:
            return
        cached = sources.from_cache(self.source, self.config.image_size, self.channels, ["test"])
        count = min(len(listing.labels), self.config.test_subset or len(listing.labels))
        for begin in range(0, count, chunk):
            indices = np.arange(begin, min(begin + chunk, count))
            if cached is not None:
                yield np.asarray(cached["test"][0][indices]), listing.labels[indices]
            else:
                yield sources.decode(listing, self.config.image_size, self.channels, indices), listing.labels[indices]

    def examples(self, count: int = 2) -> np.ndarray:
        """A few images as the model will see them (the export's input example)."""
        from tuner.data import sources

        split, indices = self.val
        if "test" in self.source.splits:
            split, indices = "test", np.arange(len(self.source.splits["test"].labels))
        listing = self.source.splits[split]
        return sources.decode(listing, self.config.image_size, self.channels, indices[:count])


@dataclass
class BuiltinData:
    """A built-in set, as the export reads it (the same methods as ``OwnData``)."""

    config: Any

    def describe(self) -> dict:
        info = DATASETS[self.config.dataset]
        shape = {"channels": info.channels, "size": info.size, "num_classes": info.num_classes}
        stats = {"mean": list(info.mean), "std": list(info.std), "classes": list(CLASS_NAMES[self.config.dataset])}
        return {"dataset": self.config.dataset, **shape, **stats}

    def test_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        split = load_test_split(self.config.dataset, self.config.root, download=self.config.download)
        count = self.config.test_subset  # the first N (all of them for None)
        yield split.images[:count], split.labels[:count]

    def examples(self, count: int = 2) -> np.ndarray:
        return load_test_split(self.config.dataset, self.config.root, download=self.config.download).images[:count]


def held_out(config, *, seed: int) -> BuiltinData | OwnData:
    """What the export reads of a sweep's data, listed once: ``describe()`` (shape, classes,
    normalisation; a user's own statistics from a sample, as a sweep records them in
    ``data.json``), ``test_chunks()`` (nothing when there is no test split) and
    ``examples()`` (test images, else validation ones)."""
    if config.dataset in DATASETS:
        return BuiltinData(config)
    return OwnData.plan(config, seed=seed, check=False)


def channel_stats(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 ``[N, C, H, W]`` images on the 0-1 scale (in
    chunks: no float copy of the whole set)."""
    channels = images.shape[1]
    total = np.zeros(channels)
    squares = np.zeros(channels)
    count = 0
    for start in range(0, len(images), 4096):
        chunk = images[start : start + 4096].astype(np.float64) / 255.0
        total += chunk.sum(axis=(0, 2, 3))
        squares += (chunk**2).sum(axis=(0, 2, 3))
        count += chunk.shape[0] * chunk.shape[2] * chunk.shape[3]
    mean = total / max(count, 1)
    std = np.sqrt(np.maximum(squares / max(count, 1) - mean**2, 1e-12))
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def load_test_split(name: str, root: str | None, *, download: bool = True, train: bool = False) -> Split:
    """The test split (or, with ``train``, the whole training split), downloading if allowed."""
    path = resolve_root(root)
    ensure_available(name, path, download=download)
    return load_split(name, path, train)


def normalise(images_uint8, mean: tuple[float, ...], std: tuple[float, ...]):
    """uint8 ``[B, C, H, W]`` tensor -> float32, scaled to [0, 1] and standardised."""
    import torch

    x = images_uint8.to(torch.float32).div_(255.0)
    m, s = _stats_on(x.device, tuple(mean), tuple(std))
    return x.sub_(m).div_(s)


@functools.lru_cache(maxsize=8)
def _stats_on(device, mean: tuple[float, ...], std: tuple[float, ...]):
    """mean and std as ``[1, C, 1, 1]`` tensors on ``device``, made once: a host-to-device
    copy per batch makes the CPU wait for the GPU every step, which costs little for a
    trial alone and half its speed when four trials share the GPU."""
    import torch

    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    return m, s
