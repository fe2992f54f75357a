"""A trial that runs the user's code instead of tuner's loop: a training function
(``trainable: my_train:train``) or a command (tuner/trial/command.py), hosted by the same
``Session`` as the loop (the Tune trial's process, or each Ray Train worker), so reports,
checkpoints, retries, PBT and resume work the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.trial.context import Context, TrialCodeError, checkpoint_start
from tuner.trial.session import LoopSettings, Session


@dataclasses.dataclass(frozen=True)
class OwnLoop:
    """What runs each trial instead of tuner's loop (plain values: pickled to workers)."""

    trainable: str | None  # module:function, called as function(params, context)
    command: tuple[str, ...] | None
    metric: str
    max_epochs: int
    uses_data: bool  # the sweep file has a data section: context.data holds it
    metric_pattern: tuple[str, ...] = ()  # a command's report lines (regexes with named groups); (): JSON, name=value
    objective: str | None = None  # an Optuna objective: module:function, called as objective(trial)
    study: str | None = None  # the objective's study keeper (a named actor: tuner/search/define_by_run.py)
    function: Any = None  # the trainable or objective itself (a notebook's, sent by value); None: import it

    @property
    def source(self) -> str:
        if self.objective:
            return f"objective {self.objective!r}"
        return f"trainable {self.trainable!r}" if self.trainable else "command"


def run_own(loop: LoopSettings, session: Session, own: OwnLoop, code_folder: Path) -> None:
    """Run the user's function or command with a ``Context``; the checkpoint to resume
    from (if any) is a local folder for as long as it runs."""
    import ray

    data = ray.get(loop.data_ref) if own.uses_data and loop.data_ref is not None else None
    trial_dir = session.trial_dir() or _trial_dir(loop.trial_id, session.rank)
    resume = session.resume_checkpoint()
    with resume.as_directory() if resume is not None else contextlib.nullcontext() as folder:
        checkpoint = Path(folder) if folder is not None else None
        context = Context(
            session=session,
            trial_id=loop.trial_id,
            trial_dir=trial_dir,
            metric=own.metric,
            max_epochs=own.max_epochs,
            source=own.source,
            data=data,
            checkpoint=checkpoint,
            start_epoch=checkpoint_start(checkpoint),
            timing={"entered_at": loop.entered_at, "first_step_at": time.time()},
        )
        with context.running():  # tuner.trial.context.current() is this trial's context
            if own.command is not None:
                from tuner.trial import command

                command.run(context, list(own.command), loop.model_options, code_folder, own.metric_pattern)
                return
            if own.objective is not None:
                from tuner.trial import optuna_api

                with _working_folder(context.trial_dir):
                    optuna_api.run_objective(own, context)
                return
            _call_function(own, dict(loop.model_options), context)
        if context.reports == 0:
            raise TrialCodeError(f"{own.source} returned before its first report")


def _call_function(own: OwnLoop, params: dict, context: Context) -> None:
    """``train(params, context)``, or a Ray Tune function's ``train(config)`` with Ray Tune's
    calls answered by the context (tuner/trial/tune_api.py), in the trial's own folder (as
    Ray Tune runs it: relative writes are the trial's, not the shared code snapshot's)."""
    from tuner.trial import tune_api
    from tuner.usercode import names

    tune_api.install()  # before the user's module imports ``report`` from ray.tune
    function = own.function or names.load(own.trainable, None, field="trainable")  # the snapshot is first on the path
    with _working_folder(context.trial_dir):
        if names.takes_context(function):
            function(params, context)
        else:
            function(params)


@contextlib.contextmanager
def _working_folder(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _trial_dir(trial_id: str, rank: int) -> Path:
    """A folder of the trial's own on this node, the same across its restarts here."""
    name = trial_id if rank == 0 else f"{trial_id}-rank{rank}"
    folder = Path(tempfile.gettempdir()) / "tuner-trials" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder
