"""tuner's callback for Hugging Face Transformers:

    from tuner.integrations.transformers import TunerCallback

    args = TrainingArguments(output_dir="out", eval_strategy="epoch", num_train_epochs=10)
    trainer = Trainer(model, args, train_dataset=train, eval_dataset=val, callbacks=[TunerCallback()])
    trainer.train(resume_from_checkpoint=TunerCallback.resume_from())

Each evaluation during ``train`` is an epoch of the tuner trial that runs this code: the
callback has the Trainer save its checkpoint right after it (``checkpoint-<step>`` in
``output_dir``, the Trainer's own: model, optimizer, scheduler, state, so that
``resume_from_checkpoint`` takes it back) and reports the evaluation's metrics with it.
The metrics are reported as the Trainer names them (``eval_accuracy``) and without their
``eval_`` prefix (``accuracy``), so a sweep's ``metric`` may be either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError:
    raise ImportError(
        "tuner.integrations.transformers needs Hugging Face Transformers: pip install 'tuner[transformers]'"
    ) from None

from tuner.errors import TunerError
from tuner.integrations.report import Reporter, numbers, reporter, resume_folder

__all__ = ["TunerCallback"]

OWNER = "TunerCallback"
PREFIX = "eval_"
TRAINER_STATE = "trainer_state.json"  # what a folder needs for resume_from_checkpoint


class TunerCallback(TrainerCallback):
    """Reports each evaluation's metrics, with the Trainer's checkpoint, to tuner's trial."""

    def __init__(self) -> None:
        self._reporter: Reporter | None = None  # set while ``train`` runs
        self._pending: dict[str, Any] | None = None  # an evaluation waiting for its checkpoint

    @staticmethod
    def resume_from() -> str | None:
        """The checkpoint folder this trial resumes from (a retry, ``tuner resume``, PBT's
        exploit), else None: ``trainer.train(resume_from_checkpoint=TunerCallback.resume_from())``."""
        folder = resume_folder()
        return str(folder) if folder is not None and (folder / TRAINER_STATE).is_file() else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._reporter = reporter(OWNER)  # no tuner trial: one line, before any training
        if args.eval_strategy == "no":
            raise TunerError(
                f"{OWNER} reports each evaluation during training, but this Trainer evaluates never "
                "(eval_strategy='no'); set TrainingArguments(eval_strategy='epoch')"
            )
        self._pending = None

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict | None = None, **kwargs: Any) -> None:
        if self._reporter is None:  # trainer.evaluate() outside train(): not an epoch of the trial's
            return
        self._flush(state)
        self._pending = named(metrics or {})
        control.should_save = True  # the Trainer saves its checkpoint next, then calls on_save

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._pending is None:  # a save of the Trainer's own (save_steps) with no evaluation
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        metrics, self._pending = self._pending, None
        self._reporter.report(metrics, folder, main=state.is_world_process_zero)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush(state)
        self._reporter = None

    def _flush(self, state: Any) -> None:
        """Report an evaluation no save followed (``save_strategy='best'`` saves only some)."""
        if self._pending is not None and self._reporter is not None:
            metrics, self._pending = self._pending, None
            self._reporter.report(metrics, None, main=state.is_world_process_zero)


def named(metrics: dict[str, Any]) -> dict[str, float | int]:
    """An evaluation's numbers as the Trainer names them and without ``eval_`` (the
    Trainer's fractional ``epoch`` left out: tuner counts the epochs)."""
    found = {name: value for name, value in numbers(metrics).items() if name != "epoch"}
    for name, value in list(found.items()):
        if name.startswith(PREFIX):
            found.setdefault(name[len(PREFIX) :], value)
    return found
