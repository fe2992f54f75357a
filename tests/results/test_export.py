"""Where an export may write: a new or empty folder, or a previous export with
``--overwrite``; never a folder of the user's, and only tuner's own files are replaced."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from integration_helpers import mnist_description

from tuner.data.datasets import DATASETS
from tuner.errors import TunerError
from tuner.models.builtin import MnistCnn
from tuner.results.export import (
    CONFIG_FILE,
    METRICS_FILE,
    MODEL_FILE,
    SCRIPT_FILE,
    check_destination,
    load_best,
    write_package,
)

OPTIONS = {"conv1": 4, "conv2": 8, "hidden": 16, "dropout": 0.0, "fc_dropout": 0.0}


def _package(seed: int) -> tuple[torch.nn.Module, dict, dict]:
    info = DATASETS["mnist"]
    torch.manual_seed(seed)
    model = MnistCnn(info.channels, info.num_classes, info.size, **OPTIONS).eval()
    config = {
        "sweep": "export_test",
        "trial_id": f"trial_{seed:05d}",
        "epoch": 1,
        "hyperparameters": {},
        "model": {"name": "cnn", "options": dict(OPTIONS)},
        "data": mnist_description(),
        "format": "state_dict",
    }
    return model, config, {"trial_id": config["trial_id"], "epoch": 1}


def _write(folder, seed: int, **options) -> None:
    model, config, metrics = _package(seed)
    if options.get("format") == "torchscript":
        config["format"] = "torchscript"
        options["example"] = np.zeros((2, 1, 28, 28), dtype=np.uint8)
    write_package(folder, model, config, metrics, **options)


def test_a_new_folder_gets_the_package_with_the_usual_permissions(tmp_path):
    folder = tmp_path / "nested" / "exported"
    _write(folder, 1)
    assert sorted(p.name for p in folder.iterdir()) == sorted([MODEL_FILE, CONFIG_FILE, METRICS_FILE])
    mask = os.umask(0)
    os.umask(mask)
    assert oct(folder.stat().st_mode & 0o777) == oct(0o777 & ~mask)
    assert oct((folder / MODEL_FILE).stat().st_mode & 0o777) == oct(0o666 & ~mask)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["exported"]  # no staging left
    assert load_best(folder).metrics["trial_id"] == "trial_00001"


def test_an_empty_folder_is_used(tmp_path):
    _write(tmp_path, 1)
    assert load_best(tmp_path).config["trial_id"] == "trial_00001"


@pytest.mark.parametrize("where", ["user_folder", "root", "a_file"])
def test_a_destination_that_is_not_an_export_is_refused_and_untouched(tmp_path, where):
    if where == "user_folder":
        destination = tmp_path / "mine"
        destination.mkdir()
        (destination / "thesis.tex").write_text("years of work\n")
        (destination / "config.yaml").write_text("not: tuner's\n")
        (destination / "metrics.json").write_text("{}\n")
    elif where == "root":
        destination = Path("/")
    else:
        destination = tmp_path / "file.txt"
        destination.write_text("a file\n")
    before = sorted(os.listdir(destination)) if destination.is_dir() else destination.read_text()
    with pytest.raises(TunerError, match=rf"^--to {destination}: exists and is not"):
        if where == "root":  # the check alone: never a write into / from a test, broken build or not
            check_destination(destination, overwrite=True)
        else:
            _write(destination, 1, overwrite=True)
    after = sorted(os.listdir(destination)) if destination.is_dir() else destination.read_text()
    assert after == before
    if where == "user_folder":
        assert (destination / "thesis.tex").read_text() == "years of work\n"
        assert (destination / "config.yaml").read_text() == "not: tuner's\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_previous_export_is_replaced_only_with_overwrite_and_only_tuners_files(tmp_path):
    folder = tmp_path / "exported"
    _write(folder, 1)
    (folder / "README.md").write_text("my notes on this model\n")
    with pytest.raises(TunerError, match=r"holds a previous export; add --overwrite to replace it"):
        _write(folder, 2)
    assert load_best(folder).config["trial_id"] == "trial_00001"

    _write(folder, 2, overwrite=True, format="torchscript")
    assert sorted(p.name for p in folder.iterdir()) == sorted(["README.md", SCRIPT_FILE, CONFIG_FILE, METRICS_FILE])
    assert (folder / "README.md").read_text() == "my notes on this model\n"
    reloaded = load_best(folder)
    assert reloaded.config["trial_id"] == "trial_00002" and isinstance(reloaded.model, torch.jit.ScriptModule)

    _write(folder, 3, overwrite=True)  # back to a state dict: the stale model.ts goes
    assert sorted(p.name for p in folder.iterdir()) == sorted(["README.md", MODEL_FILE, CONFIG_FILE, METRICS_FILE])
    assert load_best(folder).config["trial_id"] == "trial_00003"


def test_check_destination_alone(tmp_path):
    check_destination(tmp_path / "new", overwrite=False)
    check_destination(tmp_path, overwrite=False)  # empty
    _write(tmp_path / "old", 1)
    check_destination(tmp_path / "old", overwrite=True)
    with pytest.raises(TunerError, match="previous export"):
        check_destination(tmp_path / "old", overwrite=False)
