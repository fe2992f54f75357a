"""The user's code folder as a snapshot, and how a command's printed lines are read."""

from __future__ import annotations

import sys

import pytest

from tuner.trial.command import arguments, parse_line
from tuner.usercode import snapshot


def test_a_snapshot_holds_the_python_files_and_is_the_same_wherever_it_is_written(tmp_path):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("import pkg.helpers\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "helpers.py").write_text("VALUE = 3\n")
    for skipped in (".git", "runs", "__pycache__", "data", "venv"):
        (project / skipped).mkdir()
        (project / skipped / "x.py").write_text("")
    (project / "notes.txt").write_text("not code")
    taken = snapshot.take(project)
    assert sorted(taken.files) == ["pkg/__init__.py", "pkg/helpers.py", "train.py"]
    written = taken.materialise()
    assert written.name == taken.digest and (written / "pkg" / "helpers.py").read_text() == "VALUE = 3\n"
    assert taken.materialise() == written  # once per content
    kept = tmp_path / "kept"
    snapshot.write_files(taken.files, kept)
    assert snapshot.read(kept).digest == taken.digest
    (project / "train.py").write_text("changed = True\n")
    assert snapshot.take(project).digest != taken.digest


def test_a_snapshot_imports_ahead_of_a_module_of_the_same_name_imported_before(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, value in ((first, 1), (second, 2)):
        folder.mkdir()
        (folder / "same_name_model.py").write_text(f"VALUE = {value}\n")
    with snapshot.importable(first):
        import same_name_model

        assert same_name_model.VALUE == 1
    with snapshot.importable(second):
        import same_name_model

        assert same_name_model.VALUE == 2
    assert str(second) not in sys.path


@pytest.mark.parametrize(
    "line, metrics",
    [
        ("epoch 3: val_accuracy=0.981 loss=0.05", {"val_accuracy": 0.981, "loss": 0.05}),
        ('{"val_accuracy": 0.5, "note": "x", "ok": true}', {"val_accuracy": 0.5}),
        ("lr = 1e-3, f1=-2.5E+1 acc=.5", {"lr": 1e-3, "f1": -25.0, "acc": 0.5}),
        ("path=/tmp/x version=1.2.3 name=abc", {}),
        ("loss=nan", {"loss": pytest.approx(float("nan"), nan_ok=True)}),
        ("Downloading 100%", {}),
    ],
)
def test_a_printed_line_is_read_as_json_or_name_value_pairs(line, metrics):
    assert parse_line(line) == metrics


def test_a_command_gets_its_fields_and_runs_with_tuners_python():
    filled = arguments(["python", "train.py", "--lr", "{lr}", "--out={trial_dir}/x"], {"lr": 0.01, "trial_dir": "/t"})
    assert filled == [sys.executable, "train.py", "--lr", "0.01", "--out=/t/x"]
