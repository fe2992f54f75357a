"""What a user's training function gets from tuner: ``train(params, context)``.

    def train(params: dict, context: tuner.Context) -> None:
        model = build(params["width"]).to(context.device)
        start = 0
        if context.checkpoint is not None:             # a retry, a resume, PBT's exploit
            state = torch.load(context.checkpoint / "state.pt")
            model.load_state_dict(state["model"]); start = context.start_epoch
        for epoch in range(start, context.max_epochs):
            ...                                        # train one epoch
            folder = context.trial_dir / "last"        # any folder of the function's own
            torch.save({"model": model.state_dict()}, folder / "state.pt")
            context.report({"val_accuracy": accuracy, "loss": loss}, checkpoint=folder)

``report`` returns once tuner has the metrics (and a copy of the checkpoint folder); when
a scheduler stops the trial it does not return (the function ends there). Under
``scaling.workers > 1`` the function runs in every Ray Train worker with torch.distributed
set up; every rank calls ``report``, rank 0's metrics and checkpoint count.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError
from tuner.search.define_by_run import SUGGESTED
from tuner.trial.session import staged_checkpoint

if TYPE_CHECKING:  # not imported for a function that never uses torch (3-4 s of a trial's start)
    import torch

CHECKPOINT_RECORD = "tuner-checkpoint.json"  # the epoch and trial a user's checkpoint is from

_current: Context | None = None  # the trial this process runs the user's code for (``current``)


def current() -> Context | None:
    """The ``Context`` of the trial whose user code runs in this process now, or None (no
    tuner trial runs it). What a callback that takes no arguments reports through
    (tuner.integrations), and what Ray Tune's and Optuna's calls are answered by."""
    return _current


class TrialCodeError(TunerError):
    """The user's code broke the contract: no metric, no report, a failed command."""


class Context:
    """One trial's view of tuner, for a user's training function (and tuner's command runner)."""

    def __init__(
        self,
        *,
        session: Any,
        trial_id: str,
        trial_dir: Path,
        metric: str,
        max_epochs: int,
        source: str,
        data: Any = None,
        checkpoint: Path | None = None,
        start_epoch: int = 0,
        timing: dict[str, float] | None = None,
    ):
        self._session, self._source, self._timing = session, source, timing or {}
        self.trial_id = trial_id  # Tune's id of the trial
        self.trial_dir = trial_dir  # a folder of this trial's own on this node (kept across restarts there)
        self.metric = metric  # the metric the sweep optimises: every report must carry it
        self.max_epochs = max_epochs  # train.epochs: reports after which the trial ends
        self.data = data  # the data section's images (tuner.data.datasets.TrainingData) or None
        self.checkpoint = checkpoint  # a local copy of the checkpoint folder to resume from, or None
        self.start_epoch = start_epoch  # epochs reported before that checkpoint (0 for a fresh start)
        self.reports = 0  # reports made by this (re)start
        self.suggested: dict[str, Any] = {}  # an objective's values (SUGGESTED), sent with the next report
        self._sent: dict[str, Any] = {}

    @contextlib.contextmanager
    def running(self) -> Iterator[Context]:
        """While the user's code runs: ``current()`` is this context."""
        global _current
        before, _current = _current, self
        try:
            yield self
        finally:
            _current = before

    @property
    def device(self) -> torch.device:
        """The trial's device: its GPU when it has one, else the CPU."""
        return self._session.device

    @property
    def rank(self) -> int:
        return self._session.rank

    @property
    def world_size(self) -> int:
        return self._session.world

    @property
    def epoch(self) -> int:
        """Epochs reported so far, counting those before the checkpoint resumed from."""
        return self.start_epoch + self.reports

    def report(self, metrics: dict[str, Any], checkpoint: str | Path | None = None) -> None:
        """One epoch's metrics (numbers; tensors are read), and optionally a folder to keep
        as its checkpoint (copied before this returns, so the folder may be reused)."""
        values = {str(name): _number(name, value, self._source) for name, value in metrics.items()}
        if self.metric not in values:
            raise TrialCodeError(
                f"{self._source} reported {', '.join(sorted(values)) or 'no metrics'} but not the sweep's metric "
                f"{self.metric!r}"
            )
        if checkpoint is not None and not Path(checkpoint).is_dir():
            raise TrialCodeError(f"{self._source} reported checkpoint={str(checkpoint)!r}, which is not a folder")
        self.reports += 1
        values.update(epoch=self.epoch, world_size=self.world_size, nodes=_node(), **self._timing)
        if self.suggested != self._sent:
            values[SUGGESTED] = dict(self.suggested)
            self._sent = dict(self.suggested)
        with staged_checkpoint(self._session) as staging:
            keep = checkpoint is not None and self.rank == 0
            if keep:
                shutil.copytree(checkpoint, staging, dirs_exist_ok=True)
                record = {"epoch": self.epoch, "trial_id": self.trial_id}
                (Path(staging) / CHECKPOINT_RECORD).write_text(json.dumps(record))
            self._session.report(values, staging if keep else None)


def _node() -> str:
    """The Ray node this rank runs on (the history's ``nodes``, as tuner's loop reports it)."""
    import ray

    return ray.get_runtime_context().get_node_id()


def checkpoint_start(folder: Path | None) -> int:
    """The epoch a checkpoint folder from ``Context.report`` was taken at (0: none)."""
    if folder is None or not (folder / CHECKPOINT_RECORD).is_file():
        return 0
    return int(json.loads((folder / CHECKPOINT_RECORD).read_text()).get("epoch", 0))


def _number(name: Any, value: Any, source: str) -> float | int | str:
    torch = sys.modules.get("torch")  # a tensor's code has imported it
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().float().item() if value.numel() == 1 else value
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TrialCodeError(f"{source} reported {name}={value!r}: a metric is a number")
    if isinstance(value, float) and math.isnan(value):
        return value  # reported as is: a diverged trial is the scheduler's to judge
    return value
