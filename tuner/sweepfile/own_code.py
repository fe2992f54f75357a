"""A sweep file's references to the user's own code, checked when the file loads (before
Ray starts): the code folder, ``trainable``, ``model.factory``, ``command`` and
``metric_pattern``. Each failure is one ``file:line: field: ...`` line (tuner/usercode/names.py
words it)."""

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


def check(sweep: SweepConfig, loaded: LoadedYaml | None, given: Any = None) -> SweepConfig:
    """``sweep`` with ``code_dir`` made absolute, once everything it names imports and fits.
    ``given``: the trainable or objective as a function object (tuner.run's), checked in
    place of the one its reference names."""
    if not uses_own_code(sweep) and sweep.metric_pattern is None:
        return sweep
    folder = code_folder(sweep, loaded)
    try:
        _check_metric_pattern(sweep)
        if not folder.is_dir():
            raise TunerError(f"code_dir: {str(folder)!r} is not a folder")
        _check_trainable(sweep, folder, given)
        _check_objective(sweep, folder, given)
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


def _check_trainable(sweep: SweepConfig, folder: Path, given: Any = None) -> None:
    if sweep.trainable is None:
        return
    from tuner.usercode import names

    function = given or names.load(sweep.trainable, folder, field="trainable")
    if not names.takes_context(function):  # not train(params, context): Ray Tune's train(config)
        try:
            names.check_takes(function, sweep.trainable, field="trainable", positional=1)
        except TunerError as error:
            raise TunerError(
                f"{error}; a training function is train(params, context), or train(config) as Ray Tune calls it"
            ) from None


def _check_objective(sweep: SweepConfig, folder: Path, given: Any = None) -> None:
    if sweep.objective is None:
        return
    from tuner.usercode import names

    function = given or names.load(sweep.objective, folder, field="objective")
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


def _check_metric_pattern(sweep: SweepConfig) -> None:
    """Regexes that compile, each with a named group, one of them named after the metric."""
    if sweep.metric_pattern is None:
        return
    if sweep.command is None:
        raise TunerError(
            f"metric_pattern: {_as_written(sweep.metric_pattern)} reads the lines a command prints, but the file "
            "gives no command; a training function reports its metrics with context.report"
        )
    patterns = [sweep.metric_pattern] if isinstance(sweep.metric_pattern, str) else sweep.metric_pattern
    if not patterns:
        raise TunerError("metric_pattern: an empty list; give a regex with named groups, or no metric_pattern")
    groups: list[str] = []
    for pattern in patterns:
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise TunerError(f"metric_pattern: {_as_written(pattern)} is not a regex: {error}") from None
        if not compiled.groupindex:
            raise TunerError(
                f"metric_pattern: {_as_written(pattern)} has no named group; name each number it reads, as in "
                f"'{sweep.metric}: (?P<{sweep.metric}>[\\d.]+)'"
            )
        groups += [name for name in compiled.groupindex if name not in groups]
    if sweep.metric not in groups:
        raise TunerError(
            f"metric_pattern: no pattern has a group named after the sweep's metric {sweep.metric!r} (its groups: "
            f"{', '.join(groups)}); a line is a report when (?P<{sweep.metric}>...) finds a number on it"
        )


def _as_written(pattern: str | list[str]) -> str:
    """A pattern as the file has it (repr would double each backslash of ``\\d``)."""
    if isinstance(pattern, list):
        return "[" + ", ".join(map(_as_written, pattern)) + "]"
    return f"'{pattern}'"
