"""A trial that runs a user's command: ``command: ["python", "train.py", "--lr", "{lr}"]``.

Each ``{name}`` is filled in with the trial's value of a searched parameter (or
``{epochs}``, ``{trial_id}``, ``{trial_dir}``, ``{checkpoint_dir}``, ``{resume_from}``).
The command runs in the code folder (the same snapshot on every node), with:

    TUNER_CHECKPOINT_DIR   a folder to write the epoch's checkpoint to before its line
    TUNER_RESUME_FROM      the checkpoint folder to resume from ("" for a fresh start)
    TUNER_START_EPOCH      epochs done before that checkpoint (0 for a fresh start)
    TUNER_TRIAL_ID, TUNER_TRIAL_DIR, TUNER_PARAMS (the trial's values as JSON)

Every line it prints that holds the sweep's metric is one epoch's report: a JSON object
(``{"val_accuracy": 0.98, "loss": 0.05}``) or ``name=value`` pairs
(``epoch 3: val_accuracy=0.981 loss=0.05``). Its stdout and stderr (one stream) go to
``command.log`` in the trial's folder. A scheduler's stop ends it with SIGTERM, then
SIGKILL after ``GRACE_S``; it dies with the trial's process too.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tuner.trial.context import Context, TrialCodeError

GRACE_S = 10.0
PYTHONS = ("python", "python3")
PAIR = re.compile(r"([A-Za-z_][\w./-]*)\s*=\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf|nan)(?![\w.])")


def parse_line(line: str) -> dict[str, float]:
    """The metrics a printed line holds: a JSON object's numbers, or its ``name=value`` pairs."""
    text = line.strip()
    if text.startswith("{"):
        with contextlib.suppress(ValueError):
            found = json.loads(text)
            if isinstance(found, dict):
                return {str(k): v for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {name: float(value) for name, value in PAIR.findall(text)}


def arguments(command: list[str], fields: dict[str, Any]) -> list[str]:
    """The command with its ``{name}`` fields filled in; ``python`` is tuner's interpreter."""
    filled = [part.format(**fields) for part in command]
    if filled[0] in PYTHONS:
        filled[0] = sys.executable
    return filled


def run(context: Context, command: list[str], params: dict[str, Any], folder: Path) -> None:
    """Run the command to its end (or the trial's), reporting each metric line."""
    checkpoints = Path(tempfile.mkdtemp(prefix=f"tuner-{context.trial_id}-checkpoint-"))
    resume = str(context.checkpoint or "")
    fields = {
        **params,
        "epochs": context.max_epochs,
        "trial_id": context.trial_id,
        "trial_dir": str(context.trial_dir),
        "checkpoint_dir": str(checkpoints),
        "resume_from": resume,
    }
    env = {
        **os.environ,
        "TUNER_CHECKPOINT_DIR": str(checkpoints),
        "TUNER_RESUME_FROM": resume,
        "TUNER_START_EPOCH": str(context.start_epoch),
        "TUNER_TRIAL_ID": context.trial_id,
        "TUNER_TRIAL_DIR": str(context.trial_dir),
        "TUNER_PARAMS": json.dumps(params, default=str),
        "PYTHONUNBUFFERED": "1",  # a line per epoch as it is printed, not at exit
    }
    log_path = context.trial_dir / "command.log"
    seen: set[str] = set()
    last = ""  # the last line it printed: a traceback's ends with the error
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            arguments(command, fields),
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order it was printed
            start_new_session=True,  # its own process group: a stop reaches its children too
            preexec_fn=_die_with_parent,
        )
        try:
            for raw in process.stdout:
                log.write(raw)
                log.flush()
                text = raw.decode(errors="replace")
                last = text.strip()[:300] or last
                metrics = parse_line(text)
                seen.update(metrics)
                if context.metric in metrics:
                    has_checkpoint = any(checkpoints.iterdir())
                    context.report(metrics, checkpoint=checkpoints if has_checkpoint else None)
            code = process.wait()
        finally:
            _stop(process)
            shutil.rmtree(checkpoints, ignore_errors=True)  # our own folder; each report copied it
    if code != 0:
        raise TrialCodeError(f"command exited with status {code}{': ' + last if last else ''} ({_shown(log_path)})")
    if context.reports == 0:
        found = f"; its name=value pairs: {', '.join(sorted(seen))}" if seen else ""
        raise TrialCodeError(
            f"command printed no line with the sweep's metric {context.metric!r}{found} ({_shown(log_path)})"
        )


def _shown(log: Path) -> str:
    """Where the log is once the trial's folder is in the sweep's (Tune copies it there)."""
    return f"its output: tune/{log.parent.name}/{log.name} in the sweep folder"


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, SIGKILL after ``GRACE_S``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _die_with_parent() -> None:
    """In the child: SIGTERM when the trial's process dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
