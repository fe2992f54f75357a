"""The stall watchdog: a running trial that reports nothing for too long is stopped.

Ray Tune's stoppers and schedulers act only when a trial reports, so a trial stuck in a
DataLoader worker, a deadlocked collective or a lost mount held a sweep for ever. This
Tune callback (in the driver) watches the time since each running trial's last report;
past ``trials.stall_timeout_s`` it takes the stacks of the trial's process and of the
processes it started (py-spy, shipped with ``ray[default]``, on the trial's own node)
into ``stall-stacks.txt`` in the trial's folder, records the stall in the timeline, and
kills the trial's process. Tune then counts the death against ``trials.max_failures``:
the trial is retried from its last checkpoint or ends errored, and the sweep goes on.

``auto`` is generous and adapts: ``AUTO_FACTOR`` times the longest silence between two
signs of life of a trial (its start, a report, a training step of tuner's loop) seen so far
in this sweep, never under ``AUTO_FLOOR_S`` (a first epoch loads data and compiles); until
the sweep has seen one such silence end, an epoch's length is unknown and it waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune import Callback

from tuner.driver.progress import last_reported
from tuner.folder.records import append_timeline
from tuner.folder.store import HoldsFolder, SweepFolder, current
from tuner.trial.session import ALIVE_FILE, RANKS_DIR

AUTO_FLOOR_S = 600.0
AUTO_FACTOR = 5.0
STACKS_FILE = "stall-stacks.txt"
DUMP_TIMEOUT_S = 30.0


def limit_s(setting: str | float | None, slowest_s: float | None) -> float | None:
    """How long a running trial may go without a sign of life; None: for ever. ``slowest_s``:
    the longest silence between two signs seen in the sweep so far (None: none seen yet, so
    an epoch's length is unknown and ``auto`` waits)."""
    if setting is None:
        return None
    if setting == "auto":
        return None if slowest_s is None else max(AUTO_FLOOR_S, AUTO_FACTOR * slowest_s)
    return float(setting)


@dataclass
class _Clock:
    sign: float  # wall-clock time of its last sign of life (started, reported, a training step)
    report: float  # ... of its last report (or start)
    epoch: int  # its last reported epoch


class StallWatch(HoldsFolder, Callback):
    """A Tune callback (in the driver) that stops trials gone silent (see the module).

    A sign of life is a report, or, from tuner's own loop, the heartbeat file it touches
    between training steps (``tuner.trial.session.ALIVE_FILE``): a long epoch of tuner's
    loop is not silence."""

    EVERY_S = 1.0

    def __init__(self, folder: SweepFolder, setting: str | float | None) -> None:
        self.folder, self.setting = folder, setting
        self.clocks: dict[str, _Clock] = {}  # the running trials'
        self.slowest: float | None = None  # the longest silence between two signs seen in this run
        self.killed: set[str] = set()  # stopped, the death not yet handled by Tune
        self.next_look = 0.0

    def __getstate__(self) -> dict[str, Any]:  # pickled with the sweep: a resume starts its clocks anew
        return {**self.__dict__, "clocks": {}, "slowest": None, "killed": set(), "next_look": 0.0}

    def on_trial_start(self, iteration, trials, trial, **info):
        now = time.time()
        self.clocks[trial.trial_id] = _Clock(now, now, _epoch(trial))
        self.killed.discard(trial.trial_id)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        now = time.time()
        clock = self._signed(trial, now)
        clock.report, clock.epoch = now, int(result.get("training_iteration", 0))

    def _signed(self, trial: Any, when: float) -> _Clock:
        """A sign of life at ``when``: the silence it ends counts towards ``auto``'s limit."""
        clock = self.clocks.setdefault(trial.trial_id, _Clock(when, when, _epoch(trial)))
        if when > clock.sign:
            self.slowest = max(self.slowest or 0.0, when - clock.sign)
            clock.sign = when
        return clock

    def _forget(self, trial: Any) -> None:
        self.clocks.pop(trial.trial_id, None)
        self.killed.discard(trial.trial_id)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._forget(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._forget(trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._forget(trial)

    def on_step_end(self, iteration, trials, **info):
        if self.setting is None or time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + self.EVERY_S
        now = time.time()
        for trial in trials:
            if trial.status != "RUNNING":  # paused, waiting for resources, ended: no clock
                self.clocks.pop(trial.trial_id, None)
                continue
            clock = self.clocks.setdefault(trial.trial_id, _Clock(now, now, _epoch(trial)))
            beat = _heartbeat(self.folder, trial)
            if beat is not None and clock.sign < beat <= now:  # (an older one: the last start's)
                self._signed(trial, beat)
            limit = limit_s(self.setting, self.slowest)
            if limit is not None and now - clock.sign > limit and trial.trial_id not in self.killed:
                self.stop(trial, now - clock.report, now - clock.sign, clock.epoch)

    def stop(self, trial: Any, unreported_s: float, silent_s: float, epoch: int) -> None:
        """Keep the stacks of the trial's processes, record why, and kill its process."""
        import ray

        self.killed.add(trial.trial_id)
        after = f"after epoch {epoch}" if epoch else "before its first epoch"
        reason = f"stalled: no report for {unreported_s:.0f} s {after}"
        if unreported_s - silent_s >= 1:  # it trained for a while after its last report
            reason += f" (no training step for the last {silent_s:.0f} s)"
        actor = trial.temporary_state.ray_actor
        folder = current(self.folder).tune / Path(trial.path).name
        where = f"{self.folder.tune.name}/{folder.name}/{STACKS_FILE}"
        stacks = _stacks_of(actor) if actor is not None else "(the trial had no process)"
        for rank, (pid, node) in sorted(_ranks(folder).items()):  # a TorchTrainer's workers: where DDP hangs
            stacks += f"\n--- Ray Train rank {rank}\n{_stacks_on(pid, node)}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / STACKS_FILE, "a") as out:
                out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} {reason}\n{stacks}\n")
            reason += f"; its threads' stacks: {where}"
        except OSError as error:
            reason += f" (its stacks could not be written: {error})"
        # (The console's line comes when Tune handles the death: driver.callbacks.ProgressCallback.)
        append_timeline(current(self.folder), trial.trial_id, "stall", reason=reason, epoch=epoch)
        if actor is not None:
            ray.kill(actor, no_restart=True)  # Tune sees the death: a retry, or an errored trial


def _heartbeat(folder: SweepFolder, trial: Any) -> float | None:
    """When tuner's loop in the trial last touched its heartbeat file (None: no such file, as
    for a user's function or command, or a sweep at a URI)."""
    try:
        return (current(folder).tune / Path(trial.path).name / ALIVE_FILE).stat().st_mtime
    except (OSError, TypeError):
        return None


def _epoch(trial: Any) -> int:
    return int(last_reported(trial).get("training_iteration", 0) or 0)


def _stacks_of(actor: Any) -> str:
    """py-spy's dump of the actor's process and its children, taken on its node."""
    try:
        import ray
        from ray.util.state import get_actor

        # This sweep's own Ray, by address: with none given, the state API looks for every Ray
        # on the machine and refuses when another sweep's is up too.
        address = ray.get_runtime_context().gcs_address
        state = get_actor(actor._actor_id.hex(), address=address, timeout=10)
    except Exception as error:  # noqa: BLE001 - the state API is best effort here
        return f"(the trial's process could not be found: {type(error).__name__}: {error})"
    if state is None or not state.pid:
        return "(the trial's process could not be found)"
    return _stacks_on(state.pid, state.node_id)


def _stacks_on(pid: int, node_id: str) -> str:
    """``process_stacks(pid)``, run on the node the process is on."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if node_id == ray.get_runtime_context().get_node_id():
        return process_stacks(pid)
    dump = ray.remote(num_cpus=0)(process_stacks).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    )
    try:
        return ray.get(dump.remote(pid), timeout=DUMP_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001
        return f"(the stacks of process {pid} on node {node_id[:8]} could not be taken: {error})"


def _ranks(folder: Path) -> dict[int, tuple[int, str]]:
    """The Ray Train workers of a TorchTrainer trial, as its ranks noted them (tuner.trial.session.note_rank)."""
    found = {}
    for note in (folder / RANKS_DIR).glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            seen = json.loads(note.read_text())
            found[int(note.stem)] = (int(seen["pid"]), str(seen["node_id"]))
    return found


def process_stacks(pid: int) -> str:
    """Every thread's Python stack in process ``pid`` and the processes under it (py-spy),
    as text, a line saying why where one cannot be read; then the processes under it are
    killed (a user's command that ignores SIGTERM would outlive its killed trial)."""
    import psutil

    try:
        return _dump(pid)
    finally:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()


def _dump(pid: int) -> str:
    import psutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error as error:
        return f"(process {pid}: {error})"
    parts = []
    for process in processes:
        try:
            shown = " ".join(process.cmdline()).strip()[:200]  # (Ray pads its workers' titles)
        except psutil.Error:
            shown = "?"
        head = f"--- process {process.pid}: {shown}"
        if not os.path.exists(spy):
            parts.append(f"{head}\n(py-spy is not installed on this node)")
            continue
        try:
            done = subprocess.run(
                [spy, "dump", "--pid", str(process.pid)], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S
            )
            parts.append(f"{head}\n{done.stdout.strip() or done.stderr.strip()}")
        except (OSError, subprocess.TimeoutExpired) as error:
            parts.append(f"{head}\n(py-spy: {error})")
    return "\n".join(parts)
