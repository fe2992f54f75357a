"""A Ray Tune function trainable, unchanged: ``trainable: my_tune:train_fn`` where

    def train_fn(config):
        checkpoint = tune.get_checkpoint()                  # a retry, a resume, PBT's exploit
        ...
        for epoch in range(start, 100):
            ...
            with tempfile.TemporaryDirectory() as folder:
                torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
                tune.report({"loss": loss}, checkpoint=tune.Checkpoint.from_directory(folder))

runs as it runs under Ray Tune, and gets every record tuner keeps. While such a function
runs, ``ray.tune.report``, ``ray.tune.get_checkpoint`` and ``ray.tune.get_context`` are
answered by the trial's ``Context`` (tuner/trial/context.py): a report is an epoch of
tuner's (its history, MLflow, TensorBoard, the schedulers, the export), a checkpoint is
copied into the trial's as tuner's own are. They are swapped in once per process, before
the user's module is imported, so ``from ray.tune import report`` gets them too; outside a
trial they are Ray Tune's own; tuner's session reports through ``tune_report``.
"""

from __future__ import annotations

import functools
from typing import Any

from tuner.trial.context import current

_originals: dict[str, Any] = {}  # Ray Tune's own functions, once ours answer in their place


def install() -> None:
    """Answer Ray Tune's function API from the running trial's context (once per process)."""
    if _originals:
        return
    from ray import tune

    _originals.update(report=tune.report, get_checkpoint=tune.get_checkpoint, get_context=tune.get_context)
    tune.report = _answered(tune.report, _report)
    tune.get_checkpoint = _answered(tune.get_checkpoint, _get_checkpoint)
    tune.get_context = _answered(tune.get_context, _get_context)


def tune_report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
    """Ray Tune's own ``report``, for tuner's session (``ray.tune.report`` may be ours)."""
    from ray import tune

    (_originals.get("report") or tune.report)(metrics, checkpoint=checkpoint)


def _answered(original: Any, ours: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        context = current()
        if context is None:
            return original(*args, **kwargs)
        return ours(context, original, *args, **kwargs)

    return call


def _report(context: Any, original: Any, metrics: dict[str, Any], *, checkpoint: Any = None) -> None:
    if checkpoint is None:
        context.report(metrics)
    else:
        with checkpoint.as_directory() as folder:  # fetched first where it is at a URI
            context.report(metrics, checkpoint=folder)


def _get_checkpoint(context: Any, original: Any) -> Any:
    from ray import tune

    return tune.Checkpoint.from_directory(str(context.checkpoint)) if context.checkpoint is not None else None


def _get_context(context: Any, original: Any) -> Any:
    return _TrialContext(original(), context)


class _TrialContext:
    """Ray Tune's context, but for the trial folder: tuner's own (``tune/<trial>/`` in the
    sweep), where Ray Tune's would be a staging folder a reused process never copies back."""

    def __init__(self, tune_context: Any, context: Any):
        self._tune, self._context = tune_context, context

    def get_trial_dir(self) -> str:
        return str(self._context.trial_dir)

    def get_trial_id(self) -> str:
        return self._context.trial_id

    def get_world_rank(self) -> int:
        return self._context.rank

    def get_world_size(self) -> int:
        return self._context.world_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tune, name)
