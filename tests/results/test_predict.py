"""Offline prediction with an exported model: ``load_best`` on both export formats and
``python -m tuner predict`` on every kind of input, its CSV, and its user errors.

A tiny CNN is trained once per module (one epoch on 5000 real MNIST images, seconds on
one thread) and written with ``write_package``, as ``export_best`` would; Ray never starts.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from conftest import require
from integration_helpers import export_config, train_tiny_cnn

from tuner.data.datasets import load_test_split, resolve_root
from tuner.errors import TunerError
from tuner.results.export import CONFIG_FILE, METRICS_FILE, MODEL_FILE, SCRIPT_FILE, load_best, write_package

TRAIN_IMAGES = 5000


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A state_dict export and a TorchScript export of the same tiny trained CNN."""
    require((resolve_root(None) / "MNIST" / "raw").is_dir(), "real MNIST not found; set TUNER_DATA_DIR")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; this model is tiny
    try:
        train = load_test_split("mnist", None, train=True, download=False)
        test = load_test_split("mnist", None, download=False)
        subset = np.random.default_rng(0).permutation(len(train))[:TRAIN_IMAGES]
        model = train_tiny_cnn(train.images[subset], train.labels[subset])
        root = tmp_path_factory.mktemp("exports")
        metrics = {"trial_id": "trial_00000", "epoch": 1, "val_accuracy": 0.0, "test_images": len(test)}
        state_dict, torchscript = root / "best", root / "best_ts"
        write_package(state_dict, model, export_config("state_dict"), metrics)
        write_package(
            torchscript, model, export_config("torchscript"), metrics, format="torchscript", example=test.images[:2]
        )
        yield SimpleNamespace(state_dict=state_dict, torchscript=torchscript, test=test, root=root)
    finally:
        torch.set_num_threads(threads)


def _tuner(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # TUNER_DATA_DIR comes from conftest
    return subprocess.run(
        [sys.executable, "-m", "tuner", *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tuner: error:"), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def test_set_classes(exports) -> np.ndarray:
    """The state_dict export's classes for the whole MNIST test set, in process."""
    return load_best(exports.state_dict).predict(exports.test.images)[0]


# --- load_best ------------------------------------------------------------------------------
def test_export_folders_hold_the_expected_files(exports):
    assert sorted(p.name for p in exports.state_dict.iterdir()) == sorted([MODEL_FILE, CONFIG_FILE, METRICS_FILE])
    assert sorted(p.name for p in exports.torchscript.iterdir()) == sorted([SCRIPT_FILE, CONFIG_FILE, METRICS_FILE])
    assert not list(exports.root.glob("*.tmp")) and not list(exports.root.glob("*.old"))


def test_state_dict_and_torchscript_exports_agree_and_are_trained(exports, test_set_classes):
    test = exports.test
    plain, scripted = load_best(exports.state_dict), load_best(exports.torchscript)
    assert isinstance(scripted.model, torch.jit.ScriptModule) and not isinstance(plain.model, torch.jit.ScriptModule)
    assert plain.config["format"] == "state_dict" and scripted.config["format"] == "torchscript"
    assert plain.metrics["trial_id"] == "trial_00000"

    classes, confidences = plain.predict(test.images[:500])
    scripted_classes, scripted_confidences = scripted.predict(test.images[:500])
    np.testing.assert_array_equal(classes, scripted_classes)
    np.testing.assert_allclose(confidences, scripted_confidences, atol=1e-5)

    np.testing.assert_array_equal(test_set_classes[:500], classes)
    accuracy = float((test_set_classes == test.labels).mean())
    assert accuracy > 0.8, f"test accuracy {accuracy:.4f}: the model did not learn (chance is 0.1)"
    # [N, H, W] is accepted as well as [N, C, H, W]
    np.testing.assert_array_equal(plain.predict(test.images[:20, 0])[0], classes[:20])


class _Payload:
    """An arbitrary object: only a full unpickler could rebuild it."""

    def __init__(self):
        self.data = [1, 2, 3]


class _Exploit:
    """Unpickles to a call of ``os.mkdir(marker)``: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


PAYLOADS = {
    "namespace": lambda marker: {"x": collections.OrderedDict(), "y": argparse.Namespace(lr=0.1)},
    "custom_class": lambda marker: {"x": collections.OrderedDict(), "y": _Payload()},
    "code_execution": lambda marker: {"x": collections.OrderedDict(), "y": _Exploit(marker)},
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_a_pickled_python_object_is_refused_not_executed(exports, tmp_path, payload):
    folder = tmp_path / "best"
    shutil.copytree(exports.state_dict, folder)
    marker = tmp_path / "code_ran"
    torch.save(PAYLOADS[payload](marker), folder / MODEL_FILE)
    if payload == "code_execution":  # the payload is live: a full unpickler runs it
        torch.load(folder / MODEL_FILE, weights_only=False)
        assert marker.is_dir()
        marker.rmdir()
    with pytest.raises(TunerError, match=r"not a loadable tuner export \(UnpicklingError"):
        load_best(folder)
    assert not marker.exists()


def test_load_best_refuses_a_folder_that_is_not_an_export(tmp_path):
    (tmp_path / MODEL_FILE).write_bytes(b"")
    with pytest.raises(TunerError, match=r"not an exported model folder \(missing config\.yaml, metrics\.json\)"):
        load_best(tmp_path)


# --- python -m tuner predict ----------------------------------------------------------------
def test_predict_cli_on_the_mnist_test_split(exports, tmp_path):
    out = tmp_path / "predictions.csv"
    result = _tuner("predict", exports.state_dict, "--data", "mnist:test", "--out", out)
    assert result.returncode == 0, result.stderr
    header, rows = _read_csv(out)
    assert header == ["index", "predicted", "predicted_name", "confidence", "label"]
    assert len(rows) == 10000
    assert [int(r["index"]) for r in rows] == list(range(10000))
    confidences = np.array([float(r["confidence"]) for r in rows])
    assert ((confidences > 0) & (confidences <= 1)).all()
    predicted = np.array([int(r["predicted"]) for r in rows])
    assert set(predicted) <= set(range(10))
    labels = np.array([int(r["label"]) for r in rows])
    np.testing.assert_array_equal(labels, exports.test.labels)
    accuracy = float((predicted == labels).mean())
    assert accuracy > 0.8
    printed = re.search(r"wrote 10000 predictions to .* accuracy against the labels: (\d\.\d{4})", result.stdout)
    assert printed, result.stdout
    assert float(printed.group(1)) == pytest.approx(accuracy, abs=5e-5)
    assert not out.with_name(out.name + ".tmp").exists()


def test_npy_and_png_folder_inputs_predict_the_same(exports, tmp_path):
    from PIL import Image

    images = exports.test.images[:20, 0]  # uint8 [20, 28, 28]
    npy = tmp_path / "images.npy"
    np.save(npy, images)
    folder = tmp_path / "pngs"
    folder.mkdir()
    names = [f"digit_{i:02d}.png" for i in range(20)]
    for name, image in zip(names[::-1], images[::-1], strict=True):  # written out of order on purpose
        Image.fromarray(image).save(folder / name)
    (folder / "notes.txt").write_text("not an image, skipped\n")

    npy_out, folder_out = tmp_path / "npy.csv", tmp_path / "folder.csv"
    npy_result = _tuner("predict", exports.torchscript, "--data", npy, "--out", npy_out)
    assert npy_result.returncode == 0, npy_result.stderr
    folder_result = _tuner("predict", exports.torchscript, "--data", folder, "--out", folder_out)
    assert folder_result.returncode == 0, folder_result.stderr

    npy_header, npy_rows = _read_csv(npy_out)
    folder_header, folder_rows = _read_csv(folder_out)
    assert npy_header == ["index", "predicted", "predicted_name", "confidence"]
    assert folder_header == ["index", "file", "predicted", "predicted_name", "confidence"]
    assert [r["file"] for r in folder_rows] == sorted(names)
    assert [(r["predicted"], r["confidence"]) for r in npy_rows] == [
        (r["predicted"], r["confidence"]) for r in folder_rows
    ]
    # and the same classes as the model in process on the same images
    expected, _ = load_best(exports.state_dict).predict(images)
    assert [int(r["predicted"]) for r in npy_rows] == expected.tolist()


def test_idx_file_input_matches_the_data_set_split(exports, test_set_classes, tmp_path):
    from tuner.results.predict import predict_to_csv

    idx = resolve_root(None) / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    require(idx.is_file(), f"{idx} not found")
    summary = predict_to_csv(exports.state_dict, str(idx), tmp_path / "idx.csv")
    assert summary["images"] == 10000 and "accuracy" not in summary
    header, rows = _read_csv(tmp_path / "idx.csv")
    assert header == ["index", "predicted", "predicted_name", "confidence"]
    assert [int(r["predicted"]) for r in rows] == test_set_classes.tolist()


def test_predict_cli_refuses_a_folder_that_is_not_an_export(tmp_path):
    (tmp_path / "random.txt").write_text("hello\n")
    out = tmp_path / "out.csv"
    line = _one_error_line(_tuner("predict", tmp_path, "--data", "mnist:test", "--out", out))
    assert "not an exported model folder" in line
    assert not out.exists()


def test_predict_cli_refuses_data_that_is_not_there(exports, tmp_path):
    out = tmp_path / "out.csv"
    line = _one_error_line(_tuner("predict", exports.state_dict, "--data", tmp_path / "nothing_here", "--out", out))
    assert "nothing_here" in line and "no such file or folder" in line and "mnist:test" in line
    assert not out.exists()


def test_predict_cli_refuses_the_wrong_shape_and_writes_nothing(exports, tmp_path):
    npy = tmp_path / "cifar_sized.npy"
    np.save(npy, np.zeros((5, 32, 32), dtype=np.uint8))
    out = tmp_path / "not_created" / "out.csv"
    line = _one_error_line(_tuner("predict", exports.state_dict, "--data", npy, "--out", out))
    assert "[N, 1, 28, 28]" in line and "32, 32]" in line, line
    assert not out.exists()
    assert not out.with_name(out.name + ".tmp").exists()
    assert not out.parent.exists()


def test_predict_cli_refuses_a_pickled_object_as_weights(exports, tmp_path):
    folder = tmp_path / "best"
    shutil.copytree(exports.state_dict, folder)
    marker = tmp_path / "code_ran"
    torch.save({"y": _Exploit(marker)}, folder / MODEL_FILE)
    out = tmp_path / "out.csv"
    result = _tuner("predict", folder, "--data", "mnist:test", "--out", out)
    assert result.returncode == 2, result
    assert result.stderr.startswith("tuner: error:") and "Traceback" not in result.stderr, result.stderr
    assert "not a loadable tuner export" in result.stderr
    assert not marker.exists() and not out.exists()


# --- a broken export: one TunerError, in one line (the CLI prints f"tuner: error: {error}") ----
def _edit_config(folder: Path, edit) -> None:
    config = yaml.safe_load((folder / CONFIG_FILE).read_text())
    edit(config)
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))


BROKEN_EXPORTS = {
    "weights_are_a_tensor": lambda folder: torch.save(torch.zeros(3), folder / MODEL_FILE),
    "empty_config": lambda folder: (folder / CONFIG_FILE).write_text(""),
    "unknown_model_option": lambda folder: _edit_config(folder, lambda c: c["model"]["options"].update(bogus=1)),
    "weights_are_a_pickled_object": lambda folder: torch.save({"y": argparse.Namespace()}, folder / MODEL_FILE),
    "weights_do_not_fit_the_config": lambda folder: _edit_config(
        folder, lambda c: c["model"]["options"].update(hidden=64)
    ),
    "config_is_not_yaml": lambda folder: (folder / CONFIG_FILE).write_text("model: [cnn\n"),
    "metrics_is_not_json": lambda folder: (folder / METRICS_FILE).write_text("{"),
    "unknown_model_name": lambda folder: _edit_config(folder, lambda c: c["model"].update(name="vgg")),
}


@pytest.mark.parametrize(
    "broken",
    list(BROKEN_EXPORTS),
)
def test_a_broken_export_is_one_tuner_error_in_one_line(exports, tmp_path, broken):
    folder = tmp_path / "best"
    shutil.copytree(exports.state_dict, folder)
    BROKEN_EXPORTS[broken](folder)
    with pytest.raises(TunerError, match=re.escape(str(folder))) as raised:
        load_best(folder)
    assert "\n" not in str(raised.value), str(raised.value)


def test_predict_twice_to_the_same_csv_replaces_it_but_never_a_users_file(exports, tmp_path):
    out = tmp_path / "predictions.csv"
    for _ in range(2):  # the same command again works
        result = _tuner("predict", exports.state_dict, "--data", "mnist:test", "--out", out)
        assert result.returncode == 0, result.stderr
    assert len(_read_csv(out)[1]) == 10000
    mine = tmp_path / "results.csv"
    mine.write_text("name,score\nme,1\n")
    line = _one_error_line(_tuner("predict", exports.state_dict, "--data", "mnist:test", "--out", mine))
    assert f"--out {mine}: exists and is not a predictions CSV" in line
    assert mine.read_text() == "name,score\nme,1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.csv", "results.csv"]


def test_predict_batch_size_below_one_is_one_line(exports, tmp_path):
    line = _one_error_line(_tuner("predict", exports.state_dict, "--data", "mnist:test", "--batch-size", "0"))
    assert "--batch-size: must be >= 1, but got 0" in line
