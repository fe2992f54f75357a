"""A trial that runs a user's command: ``command: ["python", "train.py", "--lr", "{lr}"]``.

Each ``{name}`` is filled in with the trial's value of a searched parameter (or
``{epochs}``, ``{trial_id}``, ``{trial_dir}``, ``{checkpoint_dir}``, ``{resume_from}``).
The command runs in the trial's own folder (its relative writes are the trial's, as under
Ray Tune), its code from the code folder's snapshot: a script named relative to the code
folder is that folder's file, and the folder is first on ``PYTHONPATH`` (``python -m
pkg.module`` imports from it). The environment carries:

    TUNER_CHECKPOINT_DIR   a folder to write the epoch's checkpoint to before its line
    TUNER_RESUME_FROM      the checkpoint folder to resume from ("" for a fresh start)
    TUNER_START_EPOCH      epochs done before that checkpoint (0 for a fresh start)
    TUNER_CODE_DIR         the code folder (the snapshot the command's code runs from)
    TUNER_TRIAL_ID, TUNER_TRIAL_DIR, TUNER_PARAMS (the trial's values as JSON)
    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR,
    MASTER_PORT            as torchrun sets them: one process here; under scaling.workers > 1
                           one per Ray Train worker (tuner/trial/command_ddp.py)

Every line it prints that holds the sweep's metric is one epoch's report: a JSON object
(``{"val_accuracy": 0.98, "loss": 0.05}``) or ``name=value`` pairs
(``epoch 3: val_accuracy=0.981 loss=0.05``), or, with the sweep's ``metric_pattern``, the
numbers its regexes' named groups find (``Lines``). Its stdout and stderr (one stream) go to
``command.log`` in the trial's folder. A scheduler's stop ends it with SIGTERM to its
process group, then SIGKILL after a grace period; so does the trial process's death
(tuner/trial/command_process.py, command_guard.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuner.trial.command_process import free_port, pump, shown, started, torch_env
from tuner.trial.context import Context, TrialCodeError

PYTHONS = ("python", "python3")
PAIR = re.compile(r"([A-Za-z_][\w./-]*)\s*=\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf|nan)(?![\w.])")
SCRIPT_EPOCH = "script_epoch"  # a pattern's group ``epoch``: the script's count (tuner's ``epoch`` is its own)


def parse_line(line: str, patterns: Sequence[str | re.Pattern[str]] = ()) -> dict[str, float]:
    """The metrics a printed line holds: with ``patterns``, the numbers their named groups
    find (every pattern searched); else a JSON object's numbers, or its ``name=value`` pairs."""
    if patterns:
        return _matched(line, patterns)
    text = line.strip()
    if text.startswith("{"):
        with contextlib.suppress(ValueError):
            found = json.loads(text)
            if isinstance(found, dict):
                return {str(k): v for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {name: float(value) for name, value in PAIR.findall(text)}


def _matched(line: str, patterns: Sequence[str | re.Pattern[str]]) -> dict[str, float]:
    found: dict[str, float] = {}
    for pattern in patterns:
        match = re.search(pattern, line)
        for name, value in (match.groupdict() if match else {}).items():
            with contextlib.suppress(TypeError, ValueError):  # a group that did not take part, or no number
                found[SCRIPT_EPOCH if name == "epoch" else name] = float(value)
    return found


class Lines:
    """A command's printed lines read into reports. With patterns, the numbers found on lines
    without the metric are held for the next report (a loss line, then a validation line)."""

    def __init__(self, metric: str, patterns: Sequence[str] = ()):
        self.metric = metric
        self.patterns = [re.compile(pattern) for pattern in patterns]
        self.seen: set[str] = set()  # every metric name read, for the message when none is the metric
        self._held: dict[str, float] = {}

    def read(self, line: str) -> dict[str, float] | None:
        """The report a line is (its metrics), or None."""
        metrics = parse_line(line, self.patterns)
        self.seen.update(metrics)
        if self.metric not in metrics:
            if self.patterns:
                self._held.update(metrics)
            return None
        report, self._held = {**self._held, **metrics}, {}
        return report

    def missing(self, log: Path) -> TrialCodeError:
        """The error for a command that ended without a report."""
        how = "metric_pattern's groups" if self.patterns else "name=value pairs"
        found = f"; its {how}: {', '.join(sorted(self.seen))}" if self.seen else ""
        return TrialCodeError(f"command printed no line with the sweep's metric {self.metric!r}{found} ({shown(log)})")


def arguments(command: list[str], fields: dict[str, Any], folder: Path | None = None) -> list[str]:
    """The command with its ``{name}`` fields filled in; ``python`` is tuner's interpreter, and a
    relative script or program that is a file of the code ``folder`` is that file."""
    filled = [part.format(**fields) for part in command]
    if filled[0] in PYTHONS:
        filled[0] = sys.executable
    elif folder is not None and _in_folder(filled[0], folder) and ("/" in filled[0] or not shutil.which(filled[0])):
        filled[0] = str(folder / filled[0])
    if folder is not None:
        scripts = (i for i, part in enumerate(filled[1:], 1) if part.endswith(".py") and _in_folder(part, folder))
        for index in scripts:
            filled[index] = str(folder / filled[index])
    return filled


def _in_folder(part: str, folder: Path) -> bool:
    return not part.startswith("-") and not Path(part).is_absolute() and (folder / part).is_file()


def environment(context: Context, params: dict[str, Any], folder: Path | None, checkpoints: Path) -> dict[str, str]:
    """The command's environment: the trial's variables, the code folder first on the path."""
    env = {
        **os.environ,
        "TUNER_CHECKPOINT_DIR": str(checkpoints),
        "TUNER_RESUME_FROM": str(context.checkpoint or ""),
        "TUNER_START_EPOCH": str(context.start_epoch),
        "TUNER_TRIAL_ID": context.trial_id,
        "TUNER_TRIAL_DIR": str(context.trial_dir),
        "TUNER_PARAMS": json.dumps(params, default=str),
        "PYTHONUNBUFFERED": "1",  # a line per epoch as it is printed, not at exit
    }
    if folder is not None:
        env["TUNER_CODE_DIR"] = str(folder)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return env


def run(
    context: Context, command: list[str], params: dict[str, Any], folder: Path | None, patterns: Sequence[str] = ()
) -> None:
    """Run the command to its end (or the trial's), reporting each metric line; under
    ``scaling.workers > 1`` once per Ray Train worker, rank 0's lines the reports."""
    checkpoints = Path(tempfile.mkdtemp(prefix=f"tuner-{context.trial_id}-checkpoint-"))
    fields = {
        **params,
        "epochs": context.max_epochs,
        "trial_id": context.trial_id,
        "trial_dir": str(context.trial_dir),
        "checkpoint_dir": str(checkpoints),
        "resume_from": str(context.checkpoint or ""),
    }
    argv = arguments(command, fields, folder)
    env = environment(context, params, folder, checkpoints)
    lines = Lines(context.metric, patterns)
    try:
        if context.world_size > 1:
            from tuner.trial import command_ddp

            command_ddp.run(context, argv, env, lines, checkpoints)
        else:
            _run_alone(context, argv, env, lines, checkpoints)
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)  # our own folder; each report copied it


def _run_alone(context: Context, argv: list[str], env: dict[str, str], lines: Lines, checkpoints: Path) -> None:
    log_path = context.trial_dir / "command.log"
    one = torch_env(rank=0, world=1, local_rank=0, local_world=1, node_rank=0, address="127.0.0.1", port=free_port())

    def report(text: str) -> None:
        metrics = lines.read(text)
        if metrics is not None:
            has_checkpoint = any(checkpoints.iterdir())
            context.report(metrics, checkpoint=checkpoints if has_checkpoint else None)

    with open(log_path, "ab") as log, started(argv, {**env, **one}, context.trial_dir) as process:
        last = pump(process, log, report)
        code = process.wait()
    if code != 0:
        raise TrialCodeError(f"command exited with status {code}{': ' + last if last else ''} ({shown(log_path)})")
    if context.reports == 0:
        raise lines.missing(log_path)
