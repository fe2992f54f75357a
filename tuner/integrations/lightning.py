"""tuner's callback for PyTorch Lightning (the ``lightning`` package, or the older
``pytorch_lightning``: a Trainer of either calls its hooks):

    from tuner.integrations.lightning import TunerCallback

    trainer = lightning.Trainer(max_epochs=10, callbacks=[TunerCallback()])
    trainer.fit(model, datamodule=data, ckpt_path=TunerCallback.resume_from())

At the end of each training epoch that validated (during ``fit``; the sanity check is
not one), the Trainer saves its checkpoint (``trainer.save_checkpoint``: the module,
optimizers, loops) as ``model.ckpt`` in a folder tuner keeps, and
``trainer.callback_metrics`` go to tuner with it: the epoch's validation metrics beside its
training ones (at the validation's own end, the epoch's training means are not yet in).
A checkpoint taken there resumes at the next epoch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback
    except ImportError:
        raise ImportError(
            "tuner.integrations.lightning needs PyTorch Lightning: pip install 'tuner[lightning]'"
        ) from None

from tuner.integrations.report import CommandReporter, Reporter, numbers, reporter, resume_folder

__all__ = ["CHECKPOINT_FILE", "TunerCallback"]

CHECKPOINT_FILE = "model.ckpt"
OWNER = "TunerCallback"


class TunerCallback(Callback):
    """Reports each epoch's validation metrics, with the Trainer's checkpoint, to tuner's trial."""

    _reporter: Reporter | None = None
    _validated = False  # a validation ran in this training epoch
    _sigterm_before: Any = None

    @staticmethod
    def resume_from() -> str | None:
        """The checkpoint file this trial resumes from (a retry, ``tuner resume``, PBT's
        exploit), else None: ``trainer.fit(model, ckpt_path=TunerCallback.resume_from())``."""
        folder = resume_folder()
        path = folder / CHECKPOINT_FILE if folder is not None else None
        return str(path) if path is not None and path.is_file() else None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        self._reporter = reporter(OWNER)  # no tuner trial: one line, before any training
        self._validated = False
        if isinstance(self._reporter, CommandReporter) and threading.current_thread() is threading.main_thread():
            # tuner stops a command with SIGTERM; Lightning's own handler would raise its
            # SIGTERMException (a traceback in command.log) at the next batch, and a teardown
            # would keep the trial's process waiting.
            self._sigterm_before = signal.signal(signal.SIGTERM, _stopped)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and self._sigterm_before is not None:
            signal.signal(signal.SIGTERM, self._sigterm_before)
            self._sigterm_before = None

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._validated = True

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._validated or self._reporter is None:  # check_val_every_n_epoch > 1: not this one
            return
        self._validated = False
        with self._reporter.checkpoint_folder() as folder:
            # On every rank: a sharded strategy gathers the state; rank 0 writes the file.
            trainer.save_checkpoint(folder / CHECKPOINT_FILE, weights_only=False)
            self._reporter.report(numbers(trainer.callback_metrics), folder, main=trainer.is_global_zero)


def _stopped(signum: int, frame: Any) -> None:
    """A command stopped by tuner (or its trial's end): gone at once, as SIGTERM's default
    action would have it (tuner reuses the trial's process for the next trial only once
    the command has ended), with a line saying why instead of a traceback."""
    sys.stdout.flush()
    sys.stderr.write(f"{OWNER}: SIGTERM (tuner stops a trial this way); the run ends here\n")
    sys.stderr.flush()
    os._exit(128 + signum)
