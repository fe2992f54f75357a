"""A sweep file's references to the user's own code, checked when the file loads (before
Ray starts): the code folder, ``trainable``, ``model.factory`` and ``command``. Each
failure is one ``file:line: field: ...`` line (tuner/usercode/names.py words it)."""

from __future__ import annotations

import re
import shutil
import string
from pathlib import Path
from typing import Any

from tuner.errors import ConfigError, TunerError
from tuner.yamlio import LoadedYaml

SweepConfig = Any  # tuner.sweepfile.schema.SweepConfig, whose validator imports this module

# What a command may name besides the searched parameters (tuner/trial/command.py fills them in).
COMMAND_FIELDS = ("epochs", "trial_id", "trial_dir", "checkpoint_dir", "resume_from")
PYTHONS = ("python", "python3")  # run as the interpreter tuner runs in


def code_folder(sweep: SweepConfig, loaded: LoadedYaml | None) -> Path:
    """``code_dir`` (relative to the sweep file's folder), or that folder (the working
    folder for a sweep given as a dict)."""
    base = Path(loaded.file).resolve().parent if loaded is not None and Path(loaded.file).is_file() else Path.cwd()
    return (base / sweep.code_dir).resolve() if sweep.code_dir else base


def uses_own_code(sweep: SweepConfig) -> bool:
    return sweep.own_loop or sweep.model.name == "factory"


def check(sweep: SweepConfig, loaded: LoadedYaml | None) -> SweepConfig:
    """``sweep`` with ``code_dir`` made absolute, once everything it names imports and fits."""
    if not uses_own_code(sweep) and sweep.metric_pattern is None:
        return sweep
    folder = code_folder(sweep, loaded)
    try:
        _check_metric_pattern(sweep)
        if not folder.is_dir():
            raise TunerError(f"code_dir: {str(folder)!r} is not a folder")
        _check_trainable(sweep, folder)
        _check_objective(sweep, folder)
        _check_factory(sweep, folder)
        _check_command(sweep, folder)
    except ConfigError:
        raise
    except TunerError as error:
        raise _located(str(error), loaded) from None
    object.__setattr__(sweep, "code_dir", str(folder))
    return sweep


def _located(message: str, loaded: LoadedYaml | None) -> ConfigError:
    head = message.split(":", 1)[0]
    line = loaded.line_of(tuple(head.split("."))) if loaded is not None and re.fullmatch(r"[\w.]+", head) else None
    return ConfigError(message, file=loaded.file if loaded is not None else None, line=line)


def _check_trainable(sweep: SweepConfig, folder: Path) -> None:
    if sweep.trainable is None:
        return
    from tuner.usercode import names

    function = names.load(sweep.trainable, folder, field="trainable")
    if not names.takes_context(function):  # not train(params, context): Ray Tune's train(config)
        try:
            names.check_takes(function, sweep.trainable, field="trainable", positional=1)
        except TunerError as error:
            raise TunerError(
                f"{error}; a training function is train(params, context), or train(config) as Ray Tune calls it"
            ) from None


def _check_objective(sweep: SweepConfig, folder: Path) -> None:
    if sweep.objective is None:
        return
    from tuner.usercode import names

    function = names.load(sweep.objective, folder, field="objective")
    names.check_takes(function, sweep.objective, field="objective", positional=1)  # objective(trial)


def _check_factory(sweep: SweepConfig, folder: Path) -> None:
    if sweep.model.name != "factory":
        return
    from tuner.models import factory

    searched = [] if sweep.own_loop else sweep.searched_model_options()
    factory.check(sweep.model.factory, {**sweep.model.options, **dict.fromkeys(searched)}, folder)


def _check_command(sweep: SweepConfig, folder: Path) -> None:
    if sweep.command is None:
        return
    known = {*sweep.flat_specs(), *COMMAND_FIELDS}
    for index, part in enumerate(sweep.command):
        for _, field, _, _ in string.Formatter().parse(part):
            if field is not None and field not in known:
                raise TunerError(
                    f"command: argument {index} {part!r} names {{{field}}}, which is neither a searched parameter nor "
                    f"one of {', '.join(COMMAND_FIELDS)}"
                )
    program = sweep.command[0]
    if program not in PYTHONS and shutil.which(program) is None and not (folder / program).is_file():
        raise TunerError(f"command: program {program!r} is neither on the PATH nor in the code folder {folder}")
    for part in sweep.command[1:]:
        if part.endswith(".py") and "{" not in part and not Path(part).is_absolute() and not (folder / part).is_file():
            raise TunerError(f"command: script {part!r} is not in the code folder {folder} (set code_dir)")
