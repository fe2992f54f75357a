"""The Tune callbacks of the sweep's driver: the folder's records (history, timeline, a
whole copy of Tune's state, pruned checkpoints), the cores lent to a sweep's last trials,
and the live progress view.

Tune pickles its callbacks with the experiment, and a resumed sweep gets them back from
that pickle: they reach this process's folder and reporter through
``store.current`` and ``progress.showing``, never through what they held when pickled.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ray.tune import Callback

from tuner.driver import machine_cores, tune_start
from tuner.driver.progress import showing
from tuner.folder import EARLIER_EPOCHS
from tuner.folder.records import (
    append_epochs,
    append_timeline,
    epochs_in,
    history_file,
    keep_state_copy,
    kept_checkpoints,
    prune_checkpoints,
    read_timeline,
    stall_reasons,
    state_saved_at,
)
from tuner.folder.store import LENT_CORES_FILE, HoldsFolder, SweepFolder, current, read_json_lines, write_atomic
from tuner.later import TRIAL_FILES
from tuner.search.define_by_run import SUGGESTED


class SweepRecords(HoldsFolder, Callback):
    """A Tune callback (in the driver) that keeps ``history/`` and ``timeline.jsonl``, a
    whole copy of Tune's state, and each ended trial's ``keep`` checkpoints.

    Checkpoints are pruned here rather than by Tune's ``CheckpointConfig(num_to_keep)``:
    with it, Tune writes its whole experiment state every time a trial has saved that many
    checkpoints, so at hundreds of trials the driver spent most of its time rewriting a
    state that grows with the trials. A trial's checkpoints are pruned once it has ended
    and Tune has saved its state since (a resume never looks for a pruned one), or at the
    sweep's end; a running, paused or failed trial keeps all of its own (``None``: keep
    everything, as PBT needs)."""

    def __init__(self, folder: SweepFolder, keep: int | None = None, metric: str = "", mode: str = "max") -> None:
        self.folder, self.keep, self.metric, self.mode = folder, keep, metric, mode
        self.state_seen: dict[str, float] = {}
        self.next_prune = 0.0  # (listing tune/ is not free at thousands of trials: every 2 s at most)
        self.ended: list[tuple[float, str, Any, str]] = []  # (when, trial id, filesystem, path)
        self.last_epochs: dict[str, int] = {}  # what this run wrote: the history is read back only at a restart

    def __getstate__(self) -> dict[str, Any]:  # pickled with the sweep, before any trial
        return {**self.__dict__, "state_seen": {}, "next_prune": 0.0, "ended": [], "last_epochs": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:  # a sweep pickled before last_epochs kept none
        super().__setstate__({**state, "last_epochs": {}})

    def setup(self, **info):  # Tune has made its experiment: another sweep on this Ray may begin its own
        tune_start.begun()

    def on_step_end(self, iteration, trials, **info):
        keep_state_copy(current(self.folder), self.state_seen)
        if self.ended and time.monotonic() >= self.next_prune:
            self.next_prune = time.monotonic() + 2.0
            self._prune(saved_at=state_saved_at(current(self.folder)))

    def on_experiment_end(self, trials, **info):  # Tune has saved its final state by now
        keep_state_copy(current(self.folder), self.state_seen, force=True)
        self._prune(saved_at=float("inf"))
        TRIAL_FILES.wait(raising=False)  # (a failure: raised by the last callback, TrialFilesWritten)

    def _prune(self, saved_at: float) -> None:
        """The ended trials whose end Tune's saved state has: pruned on the thread for the
        trials' files (``tuner.later``: listing and deleting folders, not in Tune's loop)."""
        due = [ended for ended in self.ended if ended[0] < saved_at]
        if due:
            self.ended = [ended for ended in self.ended if ended[0] >= saved_at]
            TRIAL_FILES.do(self._prune_now, current(self.folder), due)

    def _prune_now(self, folder: SweepFolder, ended: list[tuple[float, str, Any, str]]) -> None:
        for _, trial_id, filesystem, trial_path in ended:  # (an ended trial's history no longer grows)
            rows = read_json_lines(history_file(folder, trial_id))
            prune_checkpoints(filesystem, trial_path, kept_checkpoints(rows, self.keep, self.metric, self.mode))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        append_epochs(current(self.folder), trial.trial_id, epochs_in(result), self.last_epochs)

    def on_trial_start(self, iteration, trials, trial, **info):
        append_timeline(current(self.folder), trial.trial_id, "start")

    def on_trial_complete(self, iteration, trials, trial, **info):
        append_timeline(current(self.folder), trial.trial_id, "end")
        if self.keep is not None:
            self.ended.append((time.time(), trial.trial_id, trial.storage.storage_filesystem, trial.path))

    def on_trial_error(self, iteration, trials, trial, **info):
        append_timeline(current(self.folder), trial.trial_id, "error")

    def on_trial_recover(self, iteration, trials, trial, **info):
        append_timeline(current(self.folder), trial.trial_id, "recover")


class SpareCores(HoldsFolder, Callback):
    """A Tune callback (in the driver) that lends the cores nobody holds to the trials still
    running, once no trial waits for a slot and none will come: a sweep's last trials no
    longer run on one core each while the others sit idle (a new user's default sweep
    spent a quarter of its slot time so). Each running trial is told its torch threads in
    ``tune/.tuner-threads.json`` ({trial id: threads}), which it reads every 2 s between
    training steps (``Session.threads``); when a trial waits again (a retry, a paused trial
    resumed) the file is emptied and each goes back to its own CPUs.

    Only for trials run directly on the CPU of a one-node cluster, with the data in
    memory: on several nodes the spare cores may be on another machine, and a streamed
    data set's pipeline needs the CPUs kept out of the trials. Cores another sweep on the
    same machine holds or lends are not spare (tuner/driver/machine_cores.py)."""

    EVERY_S = 1.0

    def __init__(self, folder: SweepFolder, total_trials: int, cpus_per_trial: int) -> None:
        self.folder, self.total, self.own = folder, total_trials, max(1, cpus_per_trial)
        self.lent: dict[str, int] = {}
        self.noted = (0, 0)  # (held, lent) as this sweep's entry in the machine's ledger says
        self.next_look = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "lent": {}, "noted": (0, 0), "next_look": 0.0}

    def setup(self, **info):  # every (re)start: a killed sweep's last shares are not this run's
        (current(self.folder).tune / LENT_CORES_FILE).unlink(missing_ok=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        # Before the trial's first epoch: Tune starts its function only after this callback.
        # (Until every trial has begun none is lent, and the ledger's count waits its second.)
        if len(trials) >= self.total:
            self.on_step_end(iteration, trials, now=True)

    def on_step_end(self, iteration, trials, now: bool = False, **info):
        if not now and time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + self.EVERY_S
        held = sum(self.own for t in trials if t.status == "RUNNING")
        with machine_cores.ledger() as ledger:  # other sweeps on this machine: what they hold and lend
            shares = self.shares(trials, others=machine_cores.others_use(ledger, os.getpid()))
            noted = (held, sum(shares.values()) - self.own * len(shares))
            if noted != getattr(self, "noted", None):  # (a sweep pickled before the ledger has none)
                machine_cores.record(ledger, os.getpid(), *noted)
                self.noted = noted
        if shares != self.lent:
            write_atomic(current(self.folder).tune / LENT_CORES_FILE, json.dumps(shares))
            self.lent = shares

    def on_experiment_end(self, trials, **info):
        (current(self.folder).tune / LENT_CORES_FILE).unlink(missing_ok=True)
        self.lent = {}
        with machine_cores.ledger() as ledger:
            machine_cores.record(ledger, os.getpid(), 0, 0)
        self.noted = (0, 0)

    def shares(self, trials: list[Any], others: int = 0) -> dict[str, int]:
        """Threads per running trial where cores are spare, else {} (each keeps its own);
        ``others``: the machine's cores other sweeps hold or lend (tuner/driver/machine_cores.py)."""
        if len(trials) < self.total or any(t.status in ("PENDING", "PAUSED") for t in trials):
            return {}
        running = sorted(t.trial_id for t in trials if t.status == "RUNNING")
        if not running:
            return {}
        import ray

        if sum(1 for node in ray.nodes() if node.get("Alive")) != 1:
            return {}
        # (Ray's view of what is free can lag a reservation just made: never past the node's cores.)
        held = len(running) * self.own
        spare = min(int(ray.available_resources().get("CPU", 0.0)), int(ray.cluster_resources().get("CPU", 0.0)) - held)
        return lend(running, self.own, min(spare, machine_cores.machine_cores() - others - held))


def failure_reason(folder: SweepFolder | None, trial: Any) -> str:
    """Why a trial failed, in one line: the stall watchdog's reason, else the last exception
    line of Tune's error file for it."""
    from tuner.results.summaries import error_reason

    stalled = stall_reasons(read_timeline(current(folder))).get(trial.trial_id) if folder is not None else None
    if stalled:
        return stalled
    try:
        with open(trial.error_file, errors="replace") as text:  # every failure so far: the last is this one
            return error_reason(text.read().rpartition("Failure # ")[2])
    except (OSError, TypeError):  # no file (a trial at a URI keeps it there)
        return ""


def lend(running: list[str], own: int, spare: int) -> dict[str, int]:
    """The spare cores shared out over the running trials, the first ones taking any left
    over; {} when there is nothing to share."""
    if spare < 1 or not running:
        return {}
    each, rest = divmod(spare, len(running))
    shares = {trial_id: own + each + (1 if i < rest else 0) for i, trial_id in enumerate(running)}
    return {trial_id: threads for trial_id, threads in shares.items() if threads > own}


class ProgressCallback(HoldsFolder, Callback):
    """A Tune callback (in the driver) feeding the reporter shown now. It holds no state
    but the folder: Tune pickles its callbacks with the sweep, and a resumed sweep gets
    this one back. A failed trial is one line with its reason; Ray's traceback stays in
    the trial's error file (and on the console with --verbose)."""

    def __init__(self, folder: SweepFolder | None = None) -> None:
        self.folder = folder

    def on_trial_start(self, iteration, trials, trial, **info):
        if reporter := showing():
            reporter.started(trials, trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if reporter := showing():
            for epoch in epochs_in(result):
                reporter.reported(trials, trial, epoch)

    def on_trial_complete(self, iteration, trials, trial, **info):
        if reporter := showing():
            reporter.ended(trials, trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        if reporter := showing():
            reporter.ended(trials, trial, errored=True, reason=failure_reason(getattr(self, "folder", None), trial))

    def on_trial_recover(self, iteration, trials, trial, **info):
        if reporter := showing():
            retries = trial.run_metadata.num_failures, trial.max_failures
            reporter.retrying(trials, trial, failure_reason(getattr(self, "folder", None), trial), *retries)

    def on_step_end(self, iteration, trials, **info):
        if reporter := showing():
            reporter.progress.observe(trials)


class StudyTrials(Callback):
    """An Optuna objective's trials on the driver's side (first of the sweep's callbacks):
    the values each was suggested, put in its Tune trial's config as they come (what MLflow,
    TensorBoard's HParams, ``status`` and ``best`` read), and a trial that ended without
    telling the study (a Ray Tune scheduler stopped it at a report, its process died) told
    (tuner/search/define_by_run.py)."""

    def __init__(self, keeper: str, metric: str = "value", max_epochs: int = 0):
        self.keeper = keeper  # the study keeper's actor name (the same for a resumed sweep's)
        self.metric, self.max_epochs = metric, max_epochs

    def on_trial_result(self, iteration, trials, trial, result, **info):
        for epoch in [*result.get(EARLIER_EPOCHS, ()), result]:  # the first report has them, held or not
            suggested = epoch.pop(SUGGESTED, None)  # Tune lets callbacks change the result in place
            if suggested:
                trial.config.update(suggested)
                trial.evaluated_params.update(suggested)
        # a Result's config is its last result's, which the trial's process sent without them
        result["config"] = {**result.get("config", {}), **trial.config}

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result or {}
        # asha's or median's max_t ended it at a report: complete, with that report's value
        reached = self.max_epochs and int(last.get("training_iteration", 0)) >= self.max_epochs
        self._close(trial, last.get(self.metric) if reached else None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._close(trial)

    def _close(self, trial: Any, value: float | None = None) -> None:
        import ray

        try:
            if self.__dict__.get("handle") is None:
                self.handle = ray.get_actor(self.keeper)
            closed = self.handle.close.remote(trial.trial_id, value)
            if trial.config:  # its values came with its reports: not waited for, in Tune's loop
                return
            given = ray.get(closed)  # (a trial that failed before its first report sent none)
        except (ValueError, ray.exceptions.RayError):  # no keeper: the driver is stopping
            return
        trial.config.update(given)
        trial.evaluated_params.update(given)

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks; a handle is this driver's
        return {k: v for k, v in self.__dict__.items() if k != "handle"}
