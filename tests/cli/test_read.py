"""The commands that read a sweep (tuner/cli/read.py) on made-up sweep folders (no Ray):
what ``status`` counts, and a reader that goes away (``| head``) ending a command quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tuner.cli import main
from tuner.folder.records import append_history
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig


def _made_up_folder(tmp_path: Path, trials: list[tuple[str, int]], num_samples: int) -> Path:
    """A sweep folder as Tune and tuner leave it: sweep.yaml, Tune's experiment state with
    ``trials`` (Tune status, epochs reported) and each trial's history."""
    sweep = SweepConfig.model_validate(
        {
            "name": "mnist_asha",
            "output_dir": str(tmp_path),
            "train": {"epochs": 3},
            "space": {"params": {"lr": {"loguniform": [1e-4, 1e-1]}}},
            "scheduler": {"name": "asha", "grace_period": 1},
            "trials": {"num_samples": num_samples},
        }
    )
    folder = SweepFolder(tmp_path / "mnist_asha")
    folder.tune.mkdir(parents=True)
    folder.history.mkdir()
    folder.config.write_text(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))
    saved = []
    for index, (status, epochs) in enumerate(trials):
        trial_id = f"a1b2c_{index:05d}"
        trial = {"trial_id": trial_id, "status": status, "config": {"lr": 1e-3}, "relative_logdir": trial_id}
        saved.append([json.dumps(trial), json.dumps({})])
        for epoch in range(1, epochs + 1):
            append_history(folder, trial_id, {"training_iteration": epoch, "val_accuracy": 0.9 + index / 1000})
    (folder.tune / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": saved}))
    return folder.root


def test_status_after_a_resume_counts_only_the_trials_that_started(tmp_path, capsys):
    """Tune saves the trials a stopped sweep had not started as PENDING: not started."""
    trials = [("TERMINATED", 3), ("TERMINATED", 1), ("TERMINATED", 3), ("PENDING", 0), ("PENDING", 0)]
    folder = _made_up_folder(tmp_path, trials, num_samples=6)  # the searcher had not made the sixth yet
    assert main(["status", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sweep mnist_asha: 3 of 6 trial(s) started (3 pending); maximise val_accuracy"
    assert sum(line.split()[1:2] == ["pending"] for line in lines[2:7]) == 2  # listed: the five Tune saved
    assert lines[7] == "  2 finished, 2 pending, 1 stopped_early"


def test_status_of_a_sweep_with_every_trial_started_names_no_pending(tmp_path, capsys):
    folder = _made_up_folder(tmp_path, [("TERMINATED", 3), ("TERMINATED", 1)], num_samples=2)
    assert main(["status", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "sweep mnist_asha: 2 of 2 trial(s) started; maximise val_accuracy"


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """``tuner status runs/x | head -1``: exit 0 and nothing on stderr, as ``git log | head``."""
    folder = _made_up_folder(tmp_path, [("PENDING", 0)] * 4000, num_samples=4000)  # ~260 KB: more than a pipe holds
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "status", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ,
    )
    first = process.stdout.readline()
    process.stdout.close()  # the reader goes away while the command still has lines to write
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    assert first.startswith(b"sweep mnist_asha: ")
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and stderr == ""


def test_results_show_the_table_that_status_prints(tmp_path, capsys):
    """``print(results)`` in Python and ``tuner status`` share one table (tuner/results/tables.py)."""
    import tuner

    folder = _made_up_folder(tmp_path, [("TERMINATED", 3), ("TERMINATED", 1), ("ERROR", 1)], num_samples=3)
    shown = str(tuner.open_results(folder)).splitlines()
    assert main(["status", str(folder)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert shown == printed[: len(shown)]
    assert shown[-2:] == [
        "  1 errored, 1 finished, 1 stopped_early",
        "  a1b2c_00002 errored: (Tune recorded no reason)",
    ]
    assert printed[len(shown)].startswith("best so far: a1b2c_00002 at epoch 1")  # not exported: no best lines
