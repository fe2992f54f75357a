"""Ctrl-C and SIGTERM during a sweep: Tune stops the trials and saves its state, and the
driver knows the sweep did not finish; Tune's own console output only with --verbose."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.driver.progress import show


class SweepInterrupted(Exception):
    """Ctrl-C: Tune stopped the trials and saved its state; ``tuner resume`` continues."""

    def __init__(self, folder: Path | str):
        super().__init__(f"interrupted; the sweep's state is saved in {folder}")
        self.folder = folder


@contextlib.contextmanager
def stop_cleanly_on_ctrl_c():
    """First Ctrl-C (or SIGTERM, as ``tuner stop`` and ``ray job stop`` send): ask Tune to
    stop and save (Tune listens to SIGUSR1); a second Ctrl-C aborts.

    Tune's own SIGINT handler would do the same but tell us nothing; this way the
    caller knows the sweep did not finish.
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def on_signal(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            return
        interrupted.set()
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        show(f"\n{what}: stopping the trials and saving the sweep's state (Ctrl-C again to abort)")
        # Tune's own words from here on (Tuner.restore advice, no metrics for the trials
        # that never started) mislead: tuner's last line says how to resume.
        for logger in quieted:
            logger.setLevel(logging.ERROR)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGUSR1)

    loggers = [logging.getLogger(name) for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis")]
    quieted = {logger: logger.level for logger in loggers}
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for logger, level in quieted.items():
            logger.setLevel(level)


@contextlib.contextmanager
def ray_output(verbose: bool) -> Iterator[None]:
    """Tune's own output only with --verbose. Its new output engine prints a config box
    and a TensorBoard hint (a temporary folder) even at verbose=0; the legacy engine, at
    verbosity 0, prints nothing. Both variables are read when fit() starts."""
    if verbose:
        yield
        return
    # A failed trial is tuner's one line with its reason (driver.callbacks.ProgressCallback);
    # Tune's 40-line traceback stays in the trial's error file. Read when fit() starts.
    quiet = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_PRINT_ALL_TRIAL_ERRORS": "0"}
    before = {name: os.environ.get(name) for name in quiet}
    os.environ.update(quiet)
    # "Trials did not complete: [...]" (tuner's summary counts them, with reasons) and a
    # retried trial's "Remote file not found: .../result.json" (its first start wrote none).
    loggers = {logging.getLogger(name): logging.CRITICAL for name in ("ray.tune.tune", "ray.tune.logger")}
    levels = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
