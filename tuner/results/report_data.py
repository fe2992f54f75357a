"""What ``tuner report`` reads of a sweep folder (``Sweep``) and the numbers behind its
plots: best so far, the scheduler's rungs, PBT's exploits, hyperparameter importance
(Optuna's fANOVA), the trials over the sweep's slots. No plotting here."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import constraints as constraining
from tuner.folder import records, remote
from tuner.folder.store import SweepFolder
from tuner.results.summaries import TrialSummary, open_sweep, trial_summaries
from tuner.search.spaces import ParamSpec
from tuner.sweepfile.schema import SweepConfig


@dataclass
class Sweep:
    """What the report reads of one sweep folder."""

    config: SweepConfig
    folder: SweepFolder
    label: str  # the folder's name: <name>, or <name>-2 for a second run
    trials: list[TrialSummary]
    histories: dict[str, list[dict[str, Any]]]
    timeline: list[dict[str, Any]]
    searched: dict[str, ParamSpec]  # the hyperparameters that vary (not the constants)
    finished: bool  # the sweep ran to its end (its best model is exported)
    now: float  # when the report read the folder

    @property
    def metric(self) -> str:
        return self.config.metric

    @property
    def maximise(self) -> bool:
        return self.config.mode == "max"

    def ended_label(self, trial: TrialSummary) -> str:
        if trial.status == "stopped_early":
            return f"stopped after epoch {trial.epochs}"
        return trial.status


def read(folder: str | Path) -> Sweep:
    config, sweep_folder = open_sweep(folder)
    histories = records.trial_histories(sweep_folder)
    trials = trial_summaries(config, sweep_folder, histories)
    # As results.best_trial: not the history of a trial lost in a crash before Tune saved it.
    saved = {t.trial_id for t in trials}
    histories = {k: v for k, v in histories.items() if k in saved}
    # Trials that started (a running one may not have reported yet); not those still waiting.
    trials = [t for t in trials if t.trial_id in histories or t.status in ("errored", "running", "interrupted")]
    if not trials:
        raise TunerError(
            f"{sweep_folder.where}: no trial of sweep {config.name!r} has reported an epoch yet; nothing to show"
        )
    specs = config.flat_specs()
    return Sweep(
        config=config,
        folder=sweep_folder,
        label=remote.name(sweep_folder.remote) if sweep_folder.remote else sweep_folder.root.name,
        trials=sorted(trials, key=lambda t: t.trial_id),
        histories=histories,
        timeline=records.read_timeline(sweep_folder),
        searched={name: spec for name, spec in specs.items() if spec.kind != "constant"},
        finished=(sweep_folder.best / "metrics.json").is_file(),
        now=time.time(),
    )


# --- the numbers behind the plots ----------------------------------------------------------------
def _events(sweep: Sweep) -> list[dict[str, Any]]:
    """The timeline's events that say when they happened, in time order."""
    timed = [e for e in sweep.timeline if isinstance(e.get("time"), (int, float))]
    return sorted(timed, key=lambda e: e["time"])


def _started_at(sweep: Sweep) -> float:
    times = [e["time"] for e in _events(sweep)]
    times += [row["reported_at"] for rows in sweep.histories.values() for row in rows if "reported_at" in row]
    return min(times) if times else sweep.now


def _reported_at(sweep: Sweep, trial_id: str, row: dict[str, Any]) -> float:
    """When the driver received an epoch; for records older than ``reported_at``, the
    trial's first start plus Tune's time_total_s."""
    if isinstance(row.get("reported_at"), (int, float)):
        return float(row["reported_at"])
    starts = [e["time"] for e in _events(sweep) if e.get("trial_id") == trial_id and e.get("event") == "start"]
    return (starts[0] if starts else _started_at(sweep)) + float(row.get("time_total_s") or 0.0)


def best_so_far(sweep: Sweep) -> list[tuple[float, int, float]]:
    """(seconds since the sweep started, epochs spent so far, best metric so far), at
    every epoch that improved on the best (of a trial that meets the sweep's constraints)."""
    start = _started_at(sweep)
    feasible = constraining.feasible_only(sweep.histories, sweep.config.parsed_constraints)  # the others never count
    epochs = [
        (_reported_at(sweep, trial_id, row), row[sweep.metric], trial_id in feasible)
        for trial_id, rows in sweep.histories.items()
        for row in rows
        if isinstance(row.get(sweep.metric), (int, float)) and row[sweep.metric] == row[sweep.metric]
    ]
    epochs.sort()
    points: list[tuple[float, int, float]] = []
    for spent, (when, value, counts) in enumerate(epochs, start=1):
        if not counts:
            continue
        if not points or (value > points[-1][2] if sweep.maximise else value < points[-1][2]):
            points.append((when - start, spent, float(value)))
    if points and epochs:
        points.append((epochs[-1][0] - start, len(epochs), points[-1][2]))  # the line runs on to the last epoch
    return points


def rungs(sweep: Sweep) -> list[int]:
    """The epochs at which the scheduler compares trials (empty for FIFO and PBT)."""
    return sweep.config.scheduler.rungs(sweep.config)


def exploits(sweep: Sweep, trial_id: str) -> list[tuple[int, str]]:
    """PBT: (epoch, donor trial) where a trial started again from another trial's checkpoint."""
    found: list[tuple[int, str]] = []
    previous: tuple[Any, str] = (None, "")
    for row in sweep.histories.get(trial_id, []):
        start = (row.get("entered_at"), row.get("resumed_from") or "")  # each start of the trial differs
        donor = start[1]
        if start != previous and donor and donor != trial_id:
            found.append((int(row["training_iteration"]), donor))
        previous = start
    return found


def common_epoch(sweep: Sweep) -> int:
    """The last epoch every trial that reported has reached: where they compare fairly.
    (A PBT clone continues at its donor's epoch, so its history may skip some.)"""
    reached = [int(rows[-1]["training_iteration"]) for t in sweep.trials if (rows := sweep.histories.get(t.trial_id))]
    return min(reached) if reached else 0


def value_at(sweep: Sweep, trial_id: str, epoch: int) -> float | None:
    """The trial's metric at ``epoch``, or at its last epoch before it; None if absent or NaN."""
    value = None
    for row in sweep.histories.get(trial_id, []):
        if int(row["training_iteration"]) > epoch:
            break
        metric = row.get(sweep.metric)
        value = float(metric) if isinstance(metric, (int, float)) and metric == metric else None
    return value


@dataclass
class Importance:
    values: dict[str, float]  # hyperparameter -> share of the metric's variance, summing to 1
    method: str  # what computed them, on which values
    note: str = ""  # why there are none
    trials: int = 0  # how many trials it was computed from


def importance(sweep: Sweep) -> Importance:
    """fANOVA (Optuna's evaluator: a random forest's functional ANOVA) of the metric at
    the epoch every trial reached, so early-stopped trials count with finished ones."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    epoch = common_epoch(sweep)
    method = (
        f"fANOVA (optuna.importance.FanovaImportanceEvaluator, 64 trees, seed 0) of {sweep.metric} at epoch {epoch}, "
        "the last epoch every trial reached"
    )
    rows = [(t.config, value_at(sweep, t.trial_id, epoch)) for t in sweep.trials]
    rows = [(c, v) for c, v in rows if v is not None]
    if not sweep.searched:
        return Importance({}, method, "nothing was searched: every hyperparameter is a constant")
    if len(rows) < 2 or len({v for _, v in rows}) < 2:
        return Importance({}, method, f"needs at least two trials with different {sweep.metric} at epoch {epoch}")
    # A conditional choice's branch parameters are in some trials only: the choice itself
    # stands for them here (fANOVA wants every parameter in every trial).
    everywhere = {name: spec for name, spec in sweep.searched.items() if all(name in c for c, _ in rows)}
    distributions: dict[str, Any] = {}
    for name, spec in everywhere.items():
        seen = [c[name] for c, _ in rows]
        if len({json.dumps(v, sort_keys=True) for v in seen}) < 2:
            continue  # one value in every trial: nothing to attribute to it
        if spec.kind in ("choice", "grid") or not all(isinstance(v, (int, float)) for v in seen):
            distributions[name] = CategoricalDistribution(sorted({json.dumps(v) for v in seen}))
        elif spec.kind == "randint" and all(isinstance(v, int) for v in seen):
            distributions[name] = IntDistribution(min(seen), max(max(seen), min(seen) + 1))
        else:  # PBT may have mutated a value beyond the space's range: span what was tried
            low, high = float(min(seen)), float(max(seen))
            distributions[name] = FloatDistribution(
                low, high, log=spec.kind in ("loguniform", "qloguniform") and low > 0
            )
    if not distributions:
        return Importance({}, method, "every searched hyperparameter had the same value in every trial")
    if len(distributions) == 1:  # all the variance is the one varied hyperparameter's: no forest to fit
        return Importance({next(iter(distributions)): 1.0}, method, trials=len(rows))
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if sweep.maximise else "minimize")
    for config, value in rows:
        params = {
            name: json.dumps(config[name]) if isinstance(d, CategoricalDistribution) else config[name]
            for name, d in distributions.items()
        }
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))
    evaluator = optuna.importance.FanovaImportanceEvaluator(n_trees=64, seed=0)
    values = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
    return Importance({k: float(v) for k, v in values.items()}, method, trials=len(rows))


@dataclass
class Bar:
    trial_id: str
    start: float  # seconds since the sweep started
    end: float
    status: str
    open: bool  # no end recorded: still running, or the driver stopped
    slot: int = 0


def slot_bars(sweep: Sweep) -> tuple[list[Bar], int]:
    """Each trial's spans of running time, placed on the lowest free slot; and the slots.

    A span without a recorded end (PBT paused the trial, or the driver stopped) ends at
    the trial's last report before it started again; one still running ends now."""
    start = _started_at(sweep)
    status = {t.trial_id: t.status for t in sweep.trials}
    reports = {k: sorted(_reported_at(sweep, k, r) for r in rows) for k, rows in sweep.histories.items()}
    bars: list[Bar] = []
    running: dict[str, float] = {}

    def cut_short(trial: str, before: float) -> None:
        began = running.pop(trial)
        last = max((t for t in reports.get(trial, []) if began <= t <= before), default=began)
        bars.append(Bar(trial, began - start, last - start, status[trial], True))

    for event in _events(sweep):
        trial, kind, when = event.get("trial_id", ""), event.get("event"), float(event["time"])
        if kind == "run":  # the driver (re)started: whatever ran before it stopped then
            for other in list(running):
                cut_short(other, when)
            continue
        if trial not in status:
            continue
        if kind == "start":
            if trial in running:  # started again without an end: paused, or restarted
                cut_short(trial, when)
            running[trial] = when
        elif kind in ("end", "error", "recover") and trial in running:
            ended = "errored" if kind in ("error", "recover") else status[trial]
            bars.append(Bar(trial, running.pop(trial) - start, when - start, ended, False))
    for trial in list(running):
        if status[trial] == "running":
            bars.append(Bar(trial, running.pop(trial) - start, max(sweep.now, start) - start, "running", True))
        else:
            cut_short(trial, float("inf"))
    bars.sort(key=lambda b: (b.start, b.trial_id))
    free_at: list[float] = []
    for bar in bars:
        slot = next((i for i, t in enumerate(free_at) if t <= bar.start + 1e-6), None)
        if slot is None:
            free_at.append(bar.end)
            slot = len(free_at) - 1
        free_at[slot] = bar.end
        bar.slot = slot
    planned = max((int(e.get("slots", 0)) for e in sweep.timeline if e.get("event") == "run"), default=0)
    return bars, max(planned, len(free_at), 1)
