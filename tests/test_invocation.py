"""The commands tuner suggests (``look further: ... report runs/x``) work from where the
user stands: outside the venv, ``python -m tuner`` is another Python, without tuner's
dependencies (issue 39)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import yaml

from tuner.cli import running
from tuner.folder.store import SweepFolder
from tuner.invocation import tuner_command


def test_without_a_tuner_script_on_path_it_names_this_interpreter(monkeypatch, tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.chdir(tmp_path)
    assert tuner_command() == "env/bin/python -m tuner"  # short: relative to the working folder
    monkeypatch.chdir(tmp_path / "..")
    assert tuner_command() == f"{tmp_path.name}/env/bin/python -m tuner"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert tuner_command() == f"{python} -m tuner"


def test_the_tuner_script_is_named_only_when_it_is_this_installs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    ours = Path(sysconfig.get_path("scripts")) / "tuner"
    monkeypatch.setattr(shutil, "which", lambda name: str(ours) if name == "tuner" else None)
    assert tuner_command() == "tuner"
    elsewhere = tmp_path / "other-env" / "bin" / "tuner"  # another environment's tuner, maybe older
    monkeypatch.setattr(shutil, "which", lambda name: str(elsewhere) if name == "tuner" else None)
    assert tuner_command().endswith(" -m tuner")


def test_a_bare_or_spaced_interpreter_path_stays_one_runnable_word(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert tuner_command() == "./python -m tuner"  # not "python": PATH's would run
    monkeypatch.setattr(sys, "executable", str(tmp_path / "my env" / "python"))
    assert tuner_command() == "'my env/python' -m tuner"


def test_the_command_runs_from_a_shell_without_the_venv_on_path():
    """Pasted into a shell whose PATH has only the system's folders (the user's terminal,
    the venv not activated), where ``python -m tuner`` is another Python's, or none."""
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        f"{tuner_command()} status --help", shell=True, capture_output=True, text=True, env=bare, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: tuner status" in done.stdout


def test_the_outcome_suggests_commands_that_start_with_it(tmp_path, capsys, monkeypatch):
    from tuner.sweepfile.load import load_sweep

    monkeypatch.setattr(running, "tuner_command", lambda: "/opt/env/bin/python -m tuner")
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep("mnist_asha", [f"output_dir={tmp_path / 'runs'}"])
    folder = SweepFolder(tmp_path / "runs" / "mnist_asha")
    folder.best.mkdir(parents=True)
    (folder.best / "config.yaml").write_text(yaml.safe_dump({"hyperparameters": {"lr": 0.002}}))
    metrics = {"trial_id": "a1b2c_00000", "epoch": 2, "val_accuracy": 0.9, "test_accuracy": 0.88, "test_images": 10}
    running._print_outcome(sweep, metrics, folder)
    lines = capsys.readouterr().out.splitlines()
    assert "  look further: /opt/env/bin/python -m tuner report runs/mnist_asha   (plots of the sweep" in lines[-3]
    assert "                /opt/env/bin/python -m tuner ui runs   (TensorBoard and MLflow UIs)" in lines
    assert "                /opt/env/bin/python -m tuner status runs/mnist_asha" in lines
