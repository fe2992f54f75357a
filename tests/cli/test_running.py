"""The commands that run a sweep (tuner/cli/running.py): a sweep refused in one line,
what a sweep's end prints, ``tuner schema``, and ``resume`` on a sweep that has ended."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig


def test_a_data_path_that_is_not_a_folder_is_one_line_naming_the_sweep_file_and_line(tmp_path):
    """Found when the data are planned, after validation, and said as validation says it."""
    sweep_file = tmp_path / "mine.yaml"
    sweep_file.write_text(
        f"name: mine\noutput_dir: {tmp_path / 'runs'}\ndata:\n  dataset: image_folder\n  channels: 1\n"
        f"  path: {tmp_path / 'nowhere'}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "sweep", str(sweep_file)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"tuner: error: {sweep_file}:6: data.path: {tmp_path / 'nowhere'} is not a folder"
    ]
    assert not (tmp_path / "runs").exists()  # refused before a folder is made


def test_the_outcome_of_a_smoke_run_says_its_model_was_logged_not_registered(tmp_path, capsys):
    from tuner.cli.running import _print_outcome
    from tuner.sweepfile.load import load_sweep

    sweep = load_sweep("mnist_asha", [f"output_dir={tmp_path}"], smoke=True)
    folder = SweepFolder(tmp_path / "mnist_asha")
    folder.best.mkdir(parents=True)
    (folder.best / "config.yaml").write_text(yaml.safe_dump({"hyperparameters": {"lr": 0.002}}))
    metrics = {"trial_id": "a1b2c_00000", "epoch": 2, "val_accuracy": 0.9, "test_accuracy": 0.88, "test_images": 10}
    _print_outcome(sweep, metrics, folder, smoke=True)  # no model_version: finish() registered nothing
    lines = capsys.readouterr().out.splitlines()
    assert (
        f"  MLflow: sqlite:///{tmp_path / 'mlflow.db'}, model logged on the sweep's run, not registered (a --smoke run)"
        in lines
    )
    assert not any("registered model" in line for line in lines)


def test_schema_is_what_an_editor_checks_sweep_files_against():
    """``tuner schema`` (the JSON Schema a YAML editor extension is pointed at) takes every
    shipped sweep file and refuses what the loader refuses: an unknown key, a wrong choice,
    a wrong type."""
    import jsonschema

    printed = subprocess.run(
        [sys.executable, "-m", "tuner", "schema"], capture_output=True, text=True, timeout=120, check=True
    )
    schema = json.loads(printed.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    editor = jsonschema.Draft202012Validator(schema)
    shipped = sorted((Path(__file__).parents[2] / "experiments").glob("*.yaml"))
    assert shipped
    for path in shipped:
        document = yaml.safe_load(path.read_text())
        assert not list(editor.iter_errors(document)), path
        SweepConfig.model_validate(document)  # the loader agrees
    base = yaml.safe_load(shipped[0].read_text())
    for bad in (
        {**base, "trails": {"num_samples": 2}},
        {**base, "mode": "maximise"},
        {**base, "trials": {"num_samples": "many"}},
        {**base, "scheduler": {"name": "asha", "grace_period": 1, "reduction": 3}},
    ):
        assert list(editor.iter_errors(bad)), bad
        with pytest.raises(ValueError):
            SweepConfig.model_validate(bad)


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "made-by-0.1"


def _ended(tmp_path: Path, tune_status: str) -> Path:
    """A real Tune experiment state (the fixture's one trial) with that trial ended as
    ``tune_status``, and the best model exported, as a finished sweep leaves them."""
    folder = tmp_path / "runs" / "made-by-0.1"
    shutil.copytree(FIXTURE, folder)
    (folder / "lock").unlink()
    (state,) = (folder / "tune").glob("experiment_state-*.json")
    saved = json.loads(state.read_text())
    for row in saved["trial_data"]:
        trial = json.loads(row[0])
        trial["status"] = tune_status
        row[0] = json.dumps(trial)
    state.write_text(json.dumps(saved))
    (state.parent / (state.name + ".tuner-copy")).write_text(json.dumps(saved))
    (folder / "best").mkdir()
    metrics = {"trial_id": "ecd7e_00000", "epoch": 1, "val_accuracy": 0.35, "test_accuracy": 0.34, "test_images": 10}
    (folder / "best" / "metrics.json").write_text(json.dumps(metrics))
    (folder / "best" / "config.yaml").write_text(yaml.safe_dump({"hyperparameters": {"lr": 0.0081}}))
    return folder


def test_resuming_a_finished_sweep_says_so_without_starting_ray(tmp_path, capsys, monkeypatch):
    import tuner.driver.sweep as driver

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started for a sweep with nothing to resume")

    monkeypatch.setattr(driver, "start_ray", no_ray)
    folder = _ended(tmp_path, "TERMINATED")
    before = {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    assert main(["resume", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"{folder}: the sweep has finished (1 trial(s) ended); nothing to resume. More trials: " in out
    assert f" extend {folder} --trials N" in out
    assert "best trial ecd7e_00000 at epoch 1: val_accuracy=0.3500, test_accuracy=0.3400 on 10 test images" in out
    after = {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    assert {name: at for name, at in after.items() if name != Path("lock")} == before  # nothing else written
    # An errored trial is what resume retries: that one goes on to Ray.
    with pytest.raises(AssertionError, match="Ray started"):
        main(["resume", str(_ended(tmp_path / "errored", "ERROR"))])


def test_results_end_with_the_best_as_a_sweep_ends(tmp_path, capsys, monkeypatch):
    """``print(results)`` ends with the lines ``sweep``, ``resume`` and ``extend`` print for the
    exported trial (tuner/results/tables.py)."""
    import tuner
    import tuner.driver.sweep as driver

    monkeypatch.setattr(driver, "start_ray", lambda *args, **kwargs: pytest.fail("Ray started"))
    folder = _ended(tmp_path, "TERMINATED")
    shown = str(tuner.open_results(folder)).splitlines()
    best = [
        "best trial ecd7e_00000 at epoch 1: val_accuracy=0.3500, test_accuracy=0.3400 on 10 test images",
        "  hyperparameters: lr=0.0081",
    ]
    assert shown[-3:] == ["", *best]
    assert shown[0] == "sweep made-by-0.1: 1 of 1 trial(s) started; maximise val_accuracy"
    assert main(["resume", str(folder)]) == 0
    printed = capsys.readouterr().out.splitlines()
    at = printed.index(best[0])
    assert printed[at - 1 : at + 2] == ["", *best]
