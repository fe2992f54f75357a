"""Sweeps that start together on one Ray begin their Tune experiments in different seconds
(Ray Train names the experiment's staging folder by that second): real processes, one lock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tuner.driver import tune_start

# A sweep's driver, reduced to the lock's part: wait for the common start, take the lock,
# name the second as Ray's StorageContext does (ray.tune.utils.date_str), let Tune's set-up
# take a while, then say the experiment is made.
SWEEP = """
import sys, time
from datetime import datetime
from pathlib import Path
from tuner.driver import tune_start
start_at, session = float(sys.argv[1]), Path(sys.argv[2])
time.sleep(max(0.0, start_at - time.time()))
with tune_start.a_second_of_its_own(session):
    print(datetime.today().strftime("%Y-%m-%d_%H-%M-%S"), flush=True)
    time.sleep(0.2)
    tune_start.begun()
    time.sleep(0.5)  # the sweep goes on; the next one need not wait for it
"""


def test_sweeps_started_together_begin_in_seconds_of_their_own(tmp_path: Path):
    start_at = time.time() + 3.0  # every process imported and waiting by then
    processes = [
        subprocess.Popen([sys.executable, "-c", SWEEP, str(start_at), str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    seconds = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert all(process.returncode == 0 for process in processes)
    assert len(set(seconds)) == 3, seconds
    assert time.time() - start_at < 5.0  # about a second's wait each, not a wait for a whole sweep
    assert int((tmp_path / tune_start.LOCK_NAME).read_text()) >= int(start_at)


def test_a_sweep_that_fails_before_tune_begins_lets_the_next_one_in(tmp_path: Path):
    try:
        with tune_start.a_second_of_its_own(tmp_path):
            raise RuntimeError("the sweep failed before Tune made its experiment")
    except RuntimeError:
        pass
    assert tune_start._held is None
    with tune_start.a_second_of_its_own(tmp_path):  # would block forever on a lock still held
        assert tune_start._held is not None
    assert tune_start._held is None


def test_a_stamp_ahead_of_the_clock_does_not_hold_a_sweep(tmp_path: Path):
    (tmp_path / tune_start.LOCK_NAME).write_text(str(int(time.time()) + 3600))  # the clock set back an hour since
    entered = time.monotonic()
    with tune_start.a_second_of_its_own(tmp_path):
        tune_start.begun()
    assert time.monotonic() - entered < 0.5
    assert int((tmp_path / tune_start.LOCK_NAME).read_text()) <= time.time()  # the clock's second, as it is now
