"""The plan's first line says what the data section is to the trials (no Ray started)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner.driver.plan import describe
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig

SPLIT = SimpleNamespace(train=range(54000), val=range(6000))  # what load_data hands the plan
MNIST = {"data": {"dataset": "mnist"}, "space": {"params": {"lr": {"loguniform": [1e-4, 1e-2]}}}}


@pytest.mark.parametrize(
    "runs, first_line",
    [
        ({}, "sweep p: 4 trial(s) x up to 3 epoch(s) of cnn on mnist (54000 train / 6000 val images)"),
        (
            {"trainable": "my_train:train"},
            "sweep p: 4 trial(s) x up to 3 epoch(s) of trainable my_train:train; "
            "context.data holds mnist (54000 train / 6000 val images)",
        ),
        (
            {"command": ["python", "train.py", "--lr", "{lr}"], "model": {"factory": "my_models:build"}},
            "sweep p: 4 trial(s) x up to 3 epoch(s) of command python train.py --lr {lr}; "
            "the command reads its own data (mnist: only the export's test score)",
        ),
    ],
)
def test_the_plan_says_whose_data_the_trials_train_on(runs, first_line, tmp_path: Path):
    sweep = SweepConfig.model_validate({"name": "p", **MNIST, **runs})
    plan = describe(sweep, 2, False, SPLIT, SweepFolder(tmp_path / "p"))
    assert plan.splitlines()[0] == first_line


def test_a_function_without_a_data_section_has_no_data_in_its_plan(tmp_path: Path):
    sweep = SweepConfig.model_validate({"name": "p", "trainable": "my_train:train", "space": MNIST["space"]})
    assert describe(sweep, 2, False, None, SweepFolder(tmp_path / "p")).splitlines()[0] == (
        "sweep p: 4 trial(s) x up to 3 epoch(s) of trainable my_train:train"
    )


def test_a_resumed_copy_says_its_mlflow_records_go_on_where_the_sweep_began(tmp_path):
    """A folder copied elsewhere keeps writing to the runs (and store) its mlflow.json names:
    the plan says so, rather than let the user look in the store beside the copy."""
    from tuner.driver.sweep import _records_elsewhere
    from tuner.folder import records

    original, copy = SweepFolder(tmp_path / "a" / "runs" / "p"), SweepFolder(tmp_path / "b" / "runs" / "p")
    store = f"sqlite:///{tmp_path / 'a' / 'runs' / 'mlflow.db'}"
    sweep_here = SweepConfig.model_validate({"name": "p", **MNIST, "output_dir": str(copy.root.parent)})
    for folder in (original, copy):
        folder.root.mkdir(parents=True)
        records.write_mlflow_state(folder, {"tracking_uri": store, "folder": str(original.root)})
    assert _records_elsewhere(sweep_here, copy) == (
        f"  MLflow: its records go on in the runs it began with, in {store}; it began in {original.root}"
    )
    sweep_there = SweepConfig.model_validate({"name": "p", **MNIST, "output_dir": str(original.root.parent)})
    assert _records_elsewhere(sweep_there, original) is None  # where it began: nothing to say
