"""Where a framework callback's epoch goes: the two ways tuner runs a user's code.

- A training function (``trainable:``) runs in the trial's process, where
  ``tuner.trial.context.current()`` is the trial's ``Context``: an epoch is
  ``context.report(metrics, checkpoint=folder)``, made on every rank (the context keeps
  rank 0's).
- A script (``command:``) runs as a child process with ``TUNER_TRIAL_ID`` and
  ``TUNER_CHECKPOINT_DIR`` in its environment: an epoch is its checkpoint written into that
  folder, then one JSON line of its metrics printed (tuner/trial/command.py reads it), by
  the main process (global rank 0) only.

Anywhere else the callback stops at once with one line (``NoTrialError``): nothing would
see its reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tuner.errors import TunerError
from tuner.trial.context import Context, current

CHECKPOINT_DIR = "TUNER_CHECKPOINT_DIR"
RESUME_FROM = "TUNER_RESUME_FROM"
TRIAL_ID = "TUNER_TRIAL_ID"


class NoTrialError(TunerError):
    """A tuner callback in code that no tuner trial runs."""


def no_trial_message(owner: str) -> str:
    return (
        f"{owner}: no tuner trial runs this code; run it through `tuner sweep` with `trainable:` or "
        "`command:` (docs/own-code.md)"
    )


class Reporter:
    """One trial's way to take an epoch's metrics and checkpoint."""

    def checkpoint_folder(self) -> contextlib.AbstractContextManager[Path]:
        """``with reporter.checkpoint_folder() as folder:`` a folder to save the epoch's
        checkpoint in and report it from."""
        raise NotImplementedError

    def report(self, metrics: dict[str, Any], checkpoint: Path | None, *, main: bool) -> None:
        """One epoch: ``metrics`` (numbers) and the folder its checkpoint is in (or None);
        ``main``: this process is the run's global rank 0."""
        raise NotImplementedError


class TrialReporter(Reporter):
    """A training function's: the trial's ``Context``, in this process."""

    def __init__(self, context: Context):
        self.context = context

    @contextlib.contextmanager
    def checkpoint_folder(self) -> Iterator[Path]:
        # A scratch folder, gone once reported: the report keeps its own copy.
        with tempfile.TemporaryDirectory(prefix=f"tuner-{self.context.trial_id}-callback-") as folder:
            yield Path(folder)

    def report(self, metrics: dict[str, Any], checkpoint: Path | None, *, main: bool) -> None:
        # Every rank reports (Ray Train waits for all); the context keeps rank 0's checkpoint.
        # When the trial is stopped this does not return (Ray Tune ends the function there).
        self.context.report(metrics, checkpoint=checkpoint if checkpoint is not None and checkpoint.is_dir() else None)


class CommandReporter(Reporter):
    """A command's: its checkpoint folder and a printed JSON line."""

    def __init__(self, checkpoint_dir: Path):
        self.checkpoint_dir = checkpoint_dir

    @contextlib.contextmanager
    def checkpoint_folder(self) -> Iterator[Path]:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        yield self.checkpoint_dir  # tuner's runner copies it when it reads the epoch's line

    def report(self, metrics: dict[str, Any], checkpoint: Path | None, *, main: bool) -> None:
        if not main:
            return
        if checkpoint is not None and checkpoint.resolve() != self.checkpoint_dir.resolve():
            _replace_contents(self.checkpoint_dir, checkpoint)
        # The leading newline ends any progress bar's unfinished line (tqdm's \r), so that
        # the JSON object starts the line tuner reads.
        sys.stdout.write("\n" + json.dumps(metrics) + "\n")
        sys.stdout.flush()


def reporter(owner: str) -> Reporter:
    """This process's trial, as a training function's context or a command's environment."""
    context = current()
    if context is not None:
        return TrialReporter(context)
    if os.environ.get(TRIAL_ID) and os.environ.get(CHECKPOINT_DIR):
        return CommandReporter(Path(os.environ[CHECKPOINT_DIR]))
    raise NoTrialError(no_trial_message(owner))


def resume_folder() -> Path | None:
    """The checkpoint folder this trial resumes from (a retry, ``tuner resume``, PBT's
    exploit), or None: a fresh start, or no tuner trial runs this code."""
    context = current()
    if context is not None:
        return context.checkpoint
    folder = os.environ.get(RESUME_FROM) if os.environ.get(TRIAL_ID) else None
    return Path(folder) if folder else None


def numbers(metrics: dict[str, Any]) -> dict[str, float | int]:
    """The metrics that are numbers: plain ones, one-element tensors and numpy scalars
    (a framework's metrics also hold strings and whole tensors, which no report takes)."""
    found: dict[str, float | int] = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.detach().float().item()
        elif hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy scalar
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found[str(name)] = value
    return found


def _replace_contents(folder: Path, source: Path) -> None:
    """``folder`` holding what ``source`` holds, and nothing from an earlier epoch."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    shutil.copytree(source, folder, dirs_exist_ok=True)
