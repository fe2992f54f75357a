"""What a trial's training loop is given and what it talks to: ``LoopSettings`` (its
settings, resolved by the trial's driver from the sweep and the sampled point) and a
``Session`` (whatever hosts it: the Tune trial's own process or a Ray Train worker,
tuner/trial/runner.py), and the one way an epoch is reported with its checkpoint.

Both the real loop (tuner/trial/loop.py) and the synthetic one (tuner/trial/synthetic.py) build on
this module, so neither imports the other's host.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a checkpoint is read or written: a user's function may never need it
    import torch
    from torch import nn

CHECKPOINT_FILE = "checkpoint.pt"
# A checkpoint folder in the trial's folder, named as Tune names its own (index = training
# iteration - 1 for those a trial writes itself: tuner.trial.runner's _TuneSession).
CHECKPOINT_NAME = re.compile(r"checkpoint_(\d{6,})")


@dataclasses.dataclass
class LoopSettings:
    """One trial's loop, as its driver resolved it (plain values and an object ref: it is
    pickled to each Ray Train worker of a TorchTrainer trial)."""

    train: dict[str, Any]  # the train section with the trial's sampled values
    model_name: str
    # the model section with the trial's sampled values, minus name; for a user's function or
    # command (``own``), the trial's values it is given as ``params``
    model_options: dict[str, Any]
    data_ref: Any  # the data set's ObjectRef (in memory) or its StreamingData
    threads: int  # torch threads: the worker's CPUs
    seed: int  # the sweep's seed plus one of the trial's own
    trial_id: str
    entered_at: float  # wall clock when the trial function began
    augment: tuple[str, ...] = ()  # data.augment (or the trial's sampled list)
    crop_padding: int = 4
    resume_from: Any = None  # a TorchTrainer trial: Tune's checkpoint to start from (a Checkpoint)
    hooks: TrialHooks = dataclasses.field(default_factory=lambda: TrialHooks())
    own: Any = None  # the user's function or command instead of the loop (tuner.trial.own.OwnLoop)
    code: Any = None  # the user's code folder (tuner.usercode.snapshot.CodeSnapshot), first on the path
    measure_latency: bool = False  # report latency_ms (inference per image) after each epoch
    # The trial's folder in the sweep (tune/<trial>/) where every node sees it, else None (a URI):
    # each Ray Train rank notes its process there (RANKS_DIR) for the stall watchdog's stacks.
    trial_folder: str | None = None


RANKS_DIR = ".ranks"  # in a trial's folder: <rank>.json = {"pid", "node_id"} of each Train worker
ALIVE_FILE = ".alive"  # in a trial's folder: touched by tuner's loop between training steps


def touch_alive(trial_folder: str | Path | None) -> None:
    """A sign of life for the stall watchdog (tuner.driver.stalls): training goes on."""
    if trial_folder is None:
        return
    try:
        (Path(trial_folder) / ALIVE_FILE).touch()
    except OSError:  # only the watchdog would miss it
        pass


def note_rank(trial_folder: str | None, rank: int) -> None:
    """Where this rank runs, for tuner.driver.stalls (a stuck rank's stacks are the ones to see)."""
    if trial_folder is None:
        return
    import json

    import ray

    folder = Path(trial_folder) / RANKS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        note = {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}
        (folder / f"{rank}.json").write_text(json.dumps(note))
    except OSError:  # only the stacks would miss it
        pass


class TrialHooks:
    """What a trial does at fixed points besides training: nothing. Tests pass their own
    (tuner/trial/testing.py) to ``run_sweep``; tuner never reads them from the environment.
    Pickled to every trial and Ray Train worker with the trial's settings."""

    train_on_cpu = False  # GPUs declared to Ray but none on the machine: train on its CPU

    def after_epoch(self, trial_id: str, epoch: int) -> None:
        """Called once epoch ``epoch`` (from 1) has trained, before it is evaluated and reported."""


class Session:
    """What the loop needs from whatever runs it: its rank, device, resume state, reports."""

    rank: int
    world: int
    device: torch.device

    def resume_state(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def resume_checkpoint(self) -> Any:
        """The checkpoint to resume from (a Ray ``Checkpoint``), or None for a fresh start."""
        raise NotImplementedError

    def trial_dir(self) -> Path | None:
        """The trial's folder in the sweep's storage, where this process can write it."""
        return None

    def staging_dir(self) -> Path | None:
        """Where a checkpoint is written before it is reported (None: a temporary folder):
        the trial's own folder where the trial keeps its checkpoints there, so that the
        report renames it into place instead of copying it."""
        return None

    def prepare_model(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def threads(self, own: int) -> int:
        """The torch threads the next training steps may use: ``own`` (the worker's CPUs), or more
        where the sweep's driver lends it spare cores (tuner.driver.callbacks.SpareCores)."""
        return own

    def alive(self) -> None:
        """Training goes on (called between steps every few seconds): a sign of life for the
        sweep's stall watchdog, which reports alone would give only once an epoch."""

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        raise NotImplementedError

    def dataset_shard(self, name: str, dataset: Any) -> Any:
        """This rank's part of a streamed split (a Ray Dataset or DataIterator)."""
        raise NotImplementedError


def load_state(path: str | os.PathLike) -> dict[str, Any]:
    """A tuner checkpoint's state dict (tensors and plain values only: weights_only)."""
    import torch

    return torch.load(Path(path) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)


def report_epoch(
    session: Session, metrics: dict[str, Any], state: dict[str, Any] | None, epoch: int, trial: str
) -> None:
    """Report an epoch with its checkpoint: ``state`` (the model's and more) saved with
    the epoch and trial it belongs to; None on the ranks other than 0, which save none."""
    import torch

    with staged_checkpoint(session) as folder:
        if state is not None:
            torch.save({**state, "epoch": epoch, "trial_id": trial}, Path(folder) / CHECKPOINT_FILE)
        session.report(metrics, folder if state is not None else None)


STAGED = ".checkpoint_staged."


def staged_checkpoint(session: Session) -> tempfile.TemporaryDirectory:
    """A folder to write a checkpoint into before reporting it (``Session.staging_dir``),
    removed after the report unless the report moved it into place. Named as a
    half-written checkpoint (``.checkpoint_*.part``) so that one a killed trial left is
    pruned with the others (tuner.folder.records.prune_checkpoints)."""
    return tempfile.TemporaryDirectory(prefix=STAGED, suffix=".part", dir=session.staging_dir())


def write_own_checkpoint(trial_dir: Path, source: str | os.PathLike, iteration: int) -> str:
    """Put the folder ``source`` into the trial's folder as the checkpoint of ``iteration``;
    returns its name. It appears whole or not at all (written beside it, then renamed): a
    folder ``staged_checkpoint`` made in the trial's folder is renamed into place, any other
    (a user's own) copied beside it first. An epoch run again after a restart replaces the
    one it repeats."""
    name = f"checkpoint_{iteration - 1:06d}"
    staged_here = Path(source).parent == trial_dir and Path(source).name.startswith(STAGED)
    if staged_here:  # whole already: renamed, not copied (ResNet-18's checkpoint is 45 MB)
        staging = Path(source)
    else:
        staging = trial_dir / f".{name}.{os.getpid()}.part"  # not a checkpoint_* name: never found half-written
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging)
    final = trial_dir / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    return name


def latest_own_checkpoint(trial_dir: Path | None, recorded: set[str] | None = None) -> tuple[Path, int] | None:
    """The newest checkpoint folder in the trial's folder and the training iteration it was
    taken at (its name's index + 1), or None. ``recorded``: only those whose epochs the
    sweep's history holds: a checkpoint written just before its process was killed, whose
    report never reached the driver, is not resumed from (its epoch runs again, as it would
    under Tune, which knows a checkpoint only by its report)."""
    found = []
    for path in trial_dir.iterdir() if trial_dir is not None and trial_dir.is_dir() else ():
        match = CHECKPOINT_NAME.fullmatch(path.name)
        if match and path.is_dir() and (recorded is None or path.name in recorded):
            found.append((int(match.group(1)), path))
    if not found:
        return None
    index, path = max(found)
    return path, index + 1
