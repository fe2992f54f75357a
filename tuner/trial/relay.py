"""How a TorchTrainer trial's epochs reach Tune: Ray Train's controller hands rank 0's
report to this callback, which queues it for the trial's own process (tuner/trial/runner.py)."""

from __future__ import annotations

from typing import Any

from ray.train.v2.api.callback import UserCallback

from tuner.folder.remote import on_local_disk


class RelayToTune(UserCallback):
    """Train callback (runs in Train's controller): pass rank 0's report to the driver."""

    def __init__(self, queue: Any):
        self.queue = queue

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        # At a storage URI a checkpoint's path has no scheme: the filesystem goes along.
        # (Locally the path alone: handing Tune Train's own Checkpoint object kept Train
        # from pruning a TorchTrainer run's old checkpoints in the HyperBand test.)
        if checkpoint is None:
            self.queue.put((dict(metrics[0]), None, None))
            return
        local = on_local_disk(checkpoint.filesystem)
        self.queue.put((dict(metrics[0]), checkpoint.path, None if local else checkpoint.filesystem))
