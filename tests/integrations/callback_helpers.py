"""Shared pieces of the callbacks' tests: a tuner trial's context without Ray (what each
report carried, with a copy of its checkpoint), and an example of examples/ swept through
the real CLI as a user runs it, with what a user then reads (histories, export, MLflow)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from integration_helpers import data_root

from tuner.trial.context import Context, checkpoint_start
from tuner.trial.session import Session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FIFO = "scheduler={name: fifo}"  # every trial to the end: under ASHA which one stops depends on timing


class RecordingSession(Session):
    """A trial's session that keeps each report: (metrics, a copy of its checkpoint or None);
    what it does not record is tuner's own default (``Session``)."""

    rank, world, device = 0, 1, torch.device("cpu")

    def __init__(self, folder: Path):
        self.folder = folder
        self.reports: list[tuple[dict[str, Any], Path | None]] = []

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        kept = None
        if checkpoint_dir is not None:
            kept = self.folder / f"report{len(self.reports) + 1}"
            shutil.copytree(checkpoint_dir, kept)
        self.reports.append((metrics, kept))


@contextlib.contextmanager
def fake_trial(
    tmp_path: Path, monkeypatch: Any, metric: str, checkpoint: Path | None = None
) -> Iterator[RecordingSession]:
    """While it lasts, ``current()`` is a trial's context (as tuner sets it around a training
    function) whose reports the yielded session records; ``checkpoint``: the folder it resumes from."""
    monkeypatch.setattr("tuner.trial.context._node", lambda: "node")  # no Ray: the report's node
    folder = tmp_path / f"trial{len(list(tmp_path.glob('trial*')))}"
    folder.mkdir()
    session = RecordingSession(folder)
    context = Context(
        session=session,
        trial_id="abcde_00000",
        trial_dir=folder,
        metric=metric,
        max_epochs=2,
        source="trainable 'test:train'",
        checkpoint=checkpoint,
        start_epoch=checkpoint_start(checkpoint),  # as tuner/trial/own.py gives it
    )
    with context.running():
        yield session


def sweep_example(name: str, sweep_file: str, tmp_path: Path, ray_tmp: Path, *overrides: str) -> Path:
    """``python -m tuner sweep examples/<name>/<sweep_file> --set ...`` from a copy of the
    example in a folder tuner never saw; the sweep's folder, once it finished and exported."""
    user = tmp_path / "user"
    shutil.copytree(EXAMPLES / name, user / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "TUNER_DATA_DIR": str(data_root()), "RAY_TMPDIR": str(ray_tmp)}
    sets = [
        part
        for item in (f"output_dir={tmp_path / 'runs'}", "tracking.mlflow.registry=false", *overrides)
        for part in ("--set", item)
    ]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "sweep", f"{name}/{sweep_file}", *sets],
        cwd=user,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"\n{name}/{sweep_file}: sweep took {time.monotonic() - started:.0f} s\n{done.stdout}")
    (root,) = [folder for folder in (tmp_path / "runs").iterdir() if folder.is_dir() and (folder / "best").is_dir()]
    return root


def mlflow_steps(root: Path, metric: str) -> dict[str, list[int]]:
    """The sweep's MLflow trial runs: trial id -> the steps of ``metric``'s history."""
    from integration_helpers import mlflow_trial_runs

    return {trial: steps for trial, (_, steps, _) in mlflow_trial_runs(root, metric).items()}
