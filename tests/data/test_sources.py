"""A user's own images, as an image folder and as Parquet, built here from real MNIST
images: listed, checked and decoded to the same uint8 pixels; the cache; bad inputs."""

from __future__ import annotations

import io

import numpy as np
import pytest
from integration_helpers import data_root

from tuner.data import sources
from tuner.data.datasets import load_split, resolve_root
from tuner.errors import TunerError


def _mnist(n: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    split = load_split("mnist", resolve_root(str(data_root())), True)
    return split.images[offset : offset + n, 0], split.labels[offset : offset + n]


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _folder(root, splits: dict[str, int]):
    """root/<split>/<digit>/<n>.png from consecutive MNIST images."""
    offset = 0
    for split, n in splits.items():
        images, labels = _mnist(n, offset)
        offset += n
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            folder = root / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:05d}.png").write_bytes(_png(image))
    return root


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))


def test_an_image_folder_decodes_to_the_same_pixels_as_the_idx_files(tmp_path):
    root = _folder(tmp_path / "digits", {"train": 300, "test": 50})
    source = sources.list_image_folder(str(root))
    assert source.classes == [str(d) for d in range(10)] and set(source.splits) == {"train", "test"}
    got, cached = sources.decoded(source, None, 1)
    assert not cached
    images, labels = _mnist(300)
    order = np.argsort(labels, kind="stable")  # the folder lists class by class
    train_x, train_y = got["train"]
    assert train_x.shape == (300, 1, 28, 28) and train_x.dtype == np.uint8
    assert np.array_equal(train_y, labels[order])
    assert np.array_equal(train_x[:, 0], images[order])
    again, cached = sources.decoded(sources.list_image_folder(str(root)), None, 1)
    assert cached and np.array_equal(again["train"][0], train_x)
    changed = source.splits["train"].files[0]
    changed.write_bytes(changed.read_bytes())  # rewritten (a new mtime): decoded again
    _, cached = sources.decoded(sources.list_image_folder(str(root)), None, 1)
    assert not cached


def test_parquet_with_string_labels_and_a_resize(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels = _mnist(120)
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    (tmp_path / "data").mkdir()
    for part in range(2):
        rows = slice(part * 60, (part + 1) * 60)
        table = pa.table({"png": [_png(i) for i in images[rows]], "digit": [names[d] for d in labels[rows]]})
        pq.write_table(table, tmp_path / "data" / f"part-{part}.parquet")
    source = sources.list_parquet(str(tmp_path / "data"), "png", "digit")
    assert source.classes == sorted(names)
    got, _ = sources.decoded(source, 32, 3)
    x, y = got["train"]
    assert x.shape == (120, 3, 32, 32)
    assert [source.classes[i] for i in y] == [names[d] for d in labels]


@pytest.mark.parametrize(
    "case, words",
    [
        ("no_folder", "is not a folder"),
        ("no_train", "has no train/ folder"),
        ("empty_class", "has no images"),
        ("unreadable", "7/00000.png: not a readable image"),
        ("mixed_sizes", "set data.image_size"),
    ],
)
def test_a_bad_image_folder_is_one_line_naming_the_file(tmp_path, case, words):
    root = tmp_path / "digits"
    if case != "no_folder":
        _folder(root, {"train": 60})
    if case == "no_train":
        (root / "train").rename(root / "training")
    elif case == "empty_class":
        (root / "train" / "extra").mkdir()
    elif case == "unreadable":
        (root / "train" / "7" / "00000.png").write_bytes(b"not a png")
    elif case == "mixed_sizes":
        from PIL import Image

        Image.new("L", (40, 40)).save(root / "train" / "1" / "99999.png")
    with pytest.raises(TunerError) as raised:
        sources.decoded(sources.list_image_folder(str(root)), None, 1)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_a_bad_label_column_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, _ = _mnist(2)
    pngs = [_png(i) for i in images]
    pq.write_table(pa.table({"image": pngs, "label": [1.5, 2.5]}), tmp_path / "floats.parquet")
    with pytest.raises(TunerError, match=r"floats.parquet:row 0: data.label_column 'label' holds 1.5; labels must be"):
        sources.list_parquet(str(tmp_path / "floats.parquet"), "image", "label")
    (tmp_path / "mixed").mkdir()
    pq.write_table(pa.table({"image": pngs, "label": [1, 2]}), tmp_path / "mixed" / "a.parquet")
    pq.write_table(pa.table({"image": pngs, "label": ["x", "y"]}), tmp_path / "mixed" / "b.parquet")
    with pytest.raises(TunerError, match="mixes integers and strings"):
        sources.list_parquet(str(tmp_path / "mixed"), "image", "label")


def test_a_missing_label_column_names_the_columns_there(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels = _mnist(2)
    pq.write_table(pa.table({"image": [_png(i) for i in images], "y": labels}), tmp_path / "x.parquet")
    with pytest.raises(TunerError, match=r"x.parquet: no column 'label' \(data.label_column\); its columns: image, y"):
        sources.list_parquet(str(tmp_path / "x.parquet"), "image", "label")


def test_an_image_folder_becomes_training_data_with_its_classes_and_statistics(tmp_path):
    from tuner.data.config import DataConfig
    from tuner.data.datasets import DATASETS, load_data

    root = _folder(tmp_path / "digits", {"train": 400, "test": 40})
    data = load_data(DataConfig(dataset="image_folder", path=str(root), channels=1, val_fraction=0.25), seed=0)
    assert (len(data.train), len(data.val), len(data.test)) == (300, 100, 40)
    assert data.classes == tuple(str(d) for d in range(10)) and data.num_classes == 10
    assert (data.channels, data.size) == (1, 28)
    # The statistics of these 300 MNIST digits are close to the whole set's published ones.
    assert abs(data.mean[0] - DATASETS["mnist"].mean[0]) < 0.02
    assert abs(data.std[0] - DATASETS["mnist"].std[0]) < 0.02


def test_headers_are_checked_without_decoding_and_name_the_odd_file(tmp_path):
    from PIL import Image

    root = _folder(tmp_path / "digits", {"train": 40})
    source = sources.list_image_folder(str(root))
    assert sources.check(source.splits["train"], None) == (28, 28)
    Image.new("L", (40, 30)).save(root / "train" / "1" / "99999.png")
    listing = sources.list_image_folder(str(root)).splits["train"]
    with pytest.raises(TunerError, match=r"99999.png: 40x30 px, but .* is 28x28; set data.image_size"):
        sources.check(listing, None)
    assert sources.check(listing, 32) == (28, 28)  # resized anyway: any sizes will do


def test_a_plan_streams_by_size_decodes_here_when_small_then_reads_its_cache_with_the_same_statistics(tmp_path):
    from tuner.data.config import DataConfig
    from tuner.data.datasets import OwnData, TrainingData

    root = _folder(tmp_path / "digits", {"train": 400, "test": 40})
    config = DataConfig(dataset="image_folder", path=str(root), channels=1, val_fraction=0.25)
    plan = OwnData.plan(config, seed=0)
    assert not plan.cached and plan.decoded_bytes == 400 * 28 * 28  # train + validation
    assert plan.streams(object_store_bytes=plan.decoded_bytes / 0.5 - 1)  # auto: over half the store
    assert not plan.streams(object_store_bytes=plan.decoded_bytes / 0.5 + 1)
    assert OwnData.plan(config.model_copy(update={"streaming": True}), seed=0).streams(object_store_bytes=1e12)
    assert 0 < plan.serial_decode_s() < 20  # 400 small PNGs: decoded in this process, no Ray needed
    sampled = plan.stats()  # what a streaming sweep normalises with (decoded from a sample)

    data, how = plan.ready(object_store_bytes=1e12)
    assert how == "here" and isinstance(data, TrainingData)
    assert [*data.mean, *data.std] == pytest.approx([*sampled[0], *sampled[1]])  # the same in memory and streamed
    again = OwnData.plan(config, seed=0)
    assert again.cached
    cached, how = again.ready(object_store_bytes=1e12)
    assert how == "cache" and np.array_equal(cached.train.images, data.train.images)
    assert np.array_equal(cached.val.labels, data.val.labels)
    assert [len(images) for images, _ in again.test_chunks(chunk=16)] == [16, 16, 8]


@pytest.mark.parametrize(
    "layout, splits",
    [
        # Hugging Face's file names; split folders below data.path; a path whose own folders
        # are named like splits (they are above data.path: not read); names that only start so.
        (["data/train-00000-of-00002.parquet", "data/test-00000-of-00001.parquet"], ["test", "train"]),
        (["train/a.parquet", "validation/b.parquet", "test/c.parquet"], ["test", "train", "val"]),
        (["test_data/a.parquet", "trainings/b.parquet"], ["train"]),
    ],
)
def test_parquet_splits_come_from_names_below_the_data_path(tmp_path, layout, splits):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels = _mnist(len(layout) * 5)
    root = tmp_path / "test" / "mine"  # a "test" folder above data.path must not matter
    for n, name in enumerate(layout):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        rows = slice(n * 5, n * 5 + 5)
        pq.write_table(pa.table({"image": [_png(i) for i in images[rows]], "label": labels[rows]}), root / name)
    assert sorted(sources.list_parquet(str(root), "image", "label").splits) == splits


def test_empty_splits_negative_labels_and_the_columns_in_the_cache_key(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = _folder(tmp_path / "digits", {"train": 30})
    (root / "test" / "3").mkdir(parents=True)
    (root / "val" / ".ipynb_checkpoints").mkdir(parents=True)  # hidden: not a class
    (root / "val" / "3").mkdir()
    (root / "val" / "3" / "x.png").write_bytes(next((root / "train" / "3").iterdir()).read_bytes())
    with pytest.raises(TunerError, match=r"digits/test has no images"):
        sources.list_image_folder(str(root))
    images, labels = _mnist(4)
    file = tmp_path / "negative.parquet"
    pq.write_table(pa.table({"image": [_png(i) for i in images], "label": [0, 1, -1, 2]}), file)
    with pytest.raises(TunerError, match=r"negative.parquet:row 2: .* holds -1; labels must be integers from 0"):
        sources.list_parquet(str(file), "image", "label")
    two = tmp_path / "two.parquet"
    pngs = [_png(i) for i in images]
    pq.write_table(pa.table({"image": pngs, "label": [0, 1, 2, 3], "other": [3, 2, 1, 0]}), two)
    by_label = sources.list_parquet(str(two), "image", "label")
    by_other = sources.list_parquet(str(two), "image", "other")
    assert sources.cache_key(by_label, None, 1) != sources.cache_key(by_other, None, 1)
    sources.decoded(by_label, None, 1)
    cached, hit = sources.decoded(by_other, None, 1)
    assert not hit and list(cached["train"][1]) == [3, 2, 1, 0]  # the other column's labels, not the cache's


def _break(root, case: str):
    """A copy of a small image folder or Parquet file, broken the way ``case`` says; the
    data config that reads it; and the file the error must name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _folder(root / "digits", {"train": 20})
    data = {"dataset": "image_folder", "path": str(folder), "channels": 1}
    if case == "missing_folder":
        return {**data, "path": str(root / "nowhere")}, "nowhere is not a folder"
    if case == "empty_class":
        (folder / "train" / "extra").mkdir()
        return data, "extra has no images"
    if case == "unreadable_image":
        (folder / "train" / "3" / "broken.png").write_bytes(b"not a png")
        return data, "3/broken.png: not a readable image"
    if case == "mixed_sizes":
        from PIL import Image

        Image.new("L", (40, 30)).save(folder / "train" / "5" / "wide.png")
        return data, "wide.png: 40x30 px"
    images, _ = _mnist(4)
    labels = [0.5, 1.0, 2.0, 3.0] if case == "float_labels" else [0, 1, 2, 3]
    pq.write_table(pa.table({"image": [_png(i) for i in images], "label": labels}), root / "rows.parquet")
    data = {"dataset": "parquet", "path": str(root / "rows.parquet"), "channels": 1}
    if case == "no_label_column":
        return {**data, "label_column": "digit"}, "no column 'digit' (data.label_column)"
    return data, "rows.parquet:row 0: data.label_column 'label' holds 0.5"


@pytest.mark.parametrize(
    "case",
    ["missing_folder", "empty_class", "unreadable_image", "mixed_sizes", "no_label_column", "float_labels"],
)
def test_bad_own_data_is_one_line_exit_2_before_ray_and_writes_nothing(tmp_path, case):
    import yaml
    from integration_helpers import tuner_cli

    data, words = _break(tmp_path, case)
    sweep = tmp_path / "mine.yaml"
    sweep.write_text(yaml.safe_dump({"name": "mine", "output_dir": str(tmp_path / "runs"), "data": data}))
    done = tuner_cli("sweep", str(sweep), timeout=120, env={"TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("tuner: error:")]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "Started a local Ray" not in done.stderr  # refused before Ray starts
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()  # nothing written


def test_what_the_export_reads_is_listed_once_for_built_in_and_own_data(tmp_path):
    from tuner.data.config import DataConfig
    from tuner.data.datasets import DATASETS, held_out

    mnist = held_out(DataConfig(dataset="mnist", root=str(data_root()), download=False), seed=0)
    assert mnist.describe()["mean"] == list(DATASETS["mnist"].mean) and mnist.describe()["num_classes"] == 10
    assert sum(len(labels) for _, labels in mnist.test_chunks()) == 10_000
    assert mnist.examples().shape == (2, 1, 28, 28)

    root = _folder(tmp_path / "digits", {"train": 60, "test": 12})
    own = held_out(DataConfig(dataset="image_folder", path=str(root), channels=1), seed=0)
    assert own.describe()["classes"] == [str(d) for d in range(10)] and own.describe()["size"] == 28
    chunks = list(own.test_chunks())
    assert sum(len(labels) for _, labels in chunks) == 12 and chunks[0][0].dtype == np.uint8
    assert np.array_equal(own.examples(), chunks[0][0][:2])  # test images first
    (tmp_path / "no_test").mkdir()
    (root / "train").rename(tmp_path / "no_test" / "train")
    without = held_out(DataConfig(dataset="image_folder", path=str(tmp_path / "no_test"), channels=1), seed=0)
    assert list(without.test_chunks()) == [] and without.examples().shape == (2, 1, 28, 28)  # validation images
