"""``tuner report RUN [RUN2]``: one self-contained HTML page about a sweep, plus PNG copies.

Read from the sweep folder alone (finished, interrupted or still running): tuner's own
records (``history/``, ``timeline.jsonl``) and Tune's trial states. The plots are
matplotlib SVGs inlined in the page; the only script is the table's sort, inlined too,
so the file opens anywhere without a network. Both are logged to the sweep's MLflow
parent run under ``report/``.

Plots: best so far against wall time and against epochs spent; every trial's learning
curve coloured by how it ended, with the scheduler's rungs (ASHA, HyperBand) or PBT's
exploits marked; parallel coordinates of the searched hyperparameters against the
metric; hyperparameter importance (Optuna's fANOVA evaluator); the trials over the
sweep's slots in time; a table of trials, sortable by any column.
"""

from __future__ import annotations

import html
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import records, remote, store
from tuner.folder.store import SweepFolder
from tuner.results.summaries import TrialSummary, open_sweep, trial_summaries
from tuner.spec.config import SweepConfig
from tuner.spec.spaces import ParamSpec

# How a trial ended -> its colour in every plot (colour-blind safe, Okabe-Ito).
COLOURS = {
    "finished": "#009E73",
    "stopped_early": "#E69F00",
    "errored": "#D55E00",
    "interrupted": "#0072B2",
    "running": "#0072B2",
    "paused": "#56B4E9",
    "pending": "#999999",
}
SWEEP_COLOURS = ("#0072B2", "#CC79A7")  # the first and second sweep of a comparison


@dataclass
class Sweep:
    """What the report reads of one sweep folder."""

    config: SweepConfig
    paths: SweepFolder
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
    config, paths = open_sweep(folder)
    histories = records.trial_histories(paths)
    trials = trial_summaries(config, paths, histories)
    # As results.best_trial: not the history of a trial lost in a crash before Tune saved it.
    saved = {t.trial_id for t in trials}
    histories = {k: v for k, v in histories.items() if k in saved}
    # Trials that started (a running one may not have reported yet); not those still waiting.
    trials = [t for t in trials if t.trial_id in histories or t.status in ("errored", "running", "interrupted")]
    if not trials:
        raise TunerError(f"{paths.where}: no trial of sweep {config.name!r} has reported an epoch yet; nothing to show")
    specs = config.param_specs()
    return Sweep(
        config=config,
        paths=paths,
        label=remote.name(paths.remote) if paths.remote else paths.root.name,
        trials=sorted(trials, key=lambda t: t.trial_id),
        histories=histories,
        timeline=records.read_timeline(paths),
        searched={name: spec for name, spec in specs.items() if spec.kind != "constant"},
        finished=(paths.best / "metrics.json").is_file(),
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
    every epoch that improved on the best."""
    start = _started_at(sweep)
    epochs = [
        (_reported_at(sweep, trial_id, row), row[sweep.metric])
        for trial_id, rows in sweep.histories.items()
        for row in rows
        if isinstance(row.get(sweep.metric), (int, float)) and row[sweep.metric] == row[sweep.metric]
    ]
    epochs.sort()
    points: list[tuple[float, int, float]] = []
    for spent, (when, value) in enumerate(epochs, start=1):
        if not points or (value > points[-1][2] if sweep.maximise else value < points[-1][2]):
            points.append((when - start, spent, float(value)))
    if points and epochs:
        points.append((epochs[-1][0] - start, len(epochs), points[-1][2]))  # the line runs on to the last epoch
    return points


def rungs(sweep: Sweep) -> list[int]:
    """The epochs at which the scheduler compares trials (empty for FIFO and PBT)."""
    scheduler, top = sweep.config.scheduler, sweep.config.max_epochs
    if scheduler.name == "asha":
        marks, epoch = [], scheduler.grace_period
        while epoch < top:
            marks.append(int(epoch))
            epoch *= scheduler.reduction_factor
        return marks
    if scheduler.name in ("hyperband", "bohb"):
        marks, epoch = [], top / scheduler.reduction_factor
        while epoch >= 1:
            marks.append(int(round(epoch)))
            epoch /= scheduler.reduction_factor
        return sorted(set(marks))
    if scheduler.name == "median":
        return [int(scheduler.grace_period)] if scheduler.grace_period < top else []
    return []


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
    rows = [(c, v) for c, v in rows if v is not None and all(name in c for name in sweep.searched)]
    if not sweep.searched:
        return Importance({}, method, "nothing was searched: every hyperparameter is a constant")
    if len(rows) < 2 or len({v for _, v in rows}) < 2:
        return Importance({}, method, f"needs at least two trials with different {sweep.metric} at epoch {epoch}")
    distributions: dict[str, Any] = {}
    for name, spec in sweep.searched.items():
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


# --- the plots -------------------------------------------------------------------------------------
def _figure(width: float = 7.5, height: float = 3.6, columns: int = 1) -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, whatever the environment says
    import matplotlib.pyplot as plt

    return plt.subplots(1, columns, figsize=(width, height), layout="constrained")


def _short(trial_id: str) -> str:
    return trial_id.rsplit("_", 1)[-1]


def plot_best_so_far(sweeps: list[Sweep]) -> Any:
    fig, (by_time, by_epochs) = _figure(9.0, 3.4, columns=2)
    for index, sweep in enumerate(sweeps):
        points = best_so_far(sweep)
        colour = SWEEP_COLOURS[index % 2] if len(sweeps) > 1 else COLOURS["finished"]
        label = sweep.label if len(sweeps) > 1 else None
        if points:
            by_time.step([p[0] / 60 for p in points], [p[2] for p in points], where="post", color=colour, label=label)
            by_time.plot([p[0] / 60 for p in points[:-1]], [p[2] for p in points[:-1]], "o", color=colour, ms=4)
            by_epochs.step([p[1] for p in points], [p[2] for p in points], where="post", color=colour, label=label)
            by_epochs.plot([p[1] for p in points[:-1]], [p[2] for p in points[:-1]], "o", color=colour, ms=4)
    by_time.set(xlabel="wall time (minutes since the sweep started)", ylabel=f"best {sweeps[0].metric} so far")
    by_epochs.set(xlabel="epochs spent (all trials)", ylabel=f"best {sweeps[0].metric} so far")
    by_time.set_xlim(left=0)
    by_epochs.xaxis.get_major_locator().set_params(integer=True)
    for ax in (by_time, by_epochs):
        ax.grid(alpha=0.3)
        if len(sweeps) > 1:
            ax.legend(fontsize=8)
    return fig


LABELLED_TRIALS = 40  # past this many, only the best trials are named (and lines lose their markers)


def _labelled(sweep: Sweep) -> set[str]:
    """The trials a plot names: all of a small sweep; the ten best of a large one (a
    thousand labels are unreadable, and laying out their text is most of a plot's time)."""
    if len(sweep.trials) <= LABELLED_TRIALS:
        return {t.trial_id for t in sweep.trials}
    scored = [t for t in sweep.trials if t.best_value is not None]
    scored.sort(key=lambda t: t.best_value, reverse=sweep.maximise)
    return {t.trial_id for t in scored[:10]}


def plot_learning_curves(sweep: Sweep) -> Any:
    from matplotlib.collections import LineCollection

    fig, ax = _figure()
    named = _labelled(sweep)
    small = len(sweep.trials) <= LABELLED_TRIALS
    # One collection per colour and line style, however many trials: a thousand separate
    # lines took seconds to lay out, draw and save twice.
    curves: dict[tuple[str, str], list[list[tuple[int, float]]]] = {}
    for trial in sweep.trials:
        rows = [r for r in sweep.histories.get(trial.trial_id, []) if isinstance(r.get(sweep.metric), (int, float))]
        if not rows:
            continue
        x = [int(r["training_iteration"]) for r in rows]
        y = [float(r[sweep.metric]) for r in rows]
        style = "--" if trial.status in ("interrupted", "running", "paused") else "-"
        curves.setdefault((trial.status, style), []).append(list(zip(x, y, strict=True)))
        if trial.trial_id in named:
            ax.annotate(_short(trial.trial_id), (x[-1], y[-1]), fontsize=7, xytext=(3, 0), textcoords="offset points")
        if trial.status == "errored":
            ax.plot(x[-1], y[-1], "x", color=COLOURS["errored"], ms=8)
        marks = [(epoch, y[x.index(epoch)], donor) for epoch, donor in exploits(sweep, trial.trial_id) if epoch in x]
        for epoch, value, donor in marks:
            ax.plot(epoch, value, "*", color="black", ms=9, label="PBT exploit (continued from a better trial)")
            ax.annotate(
                f"from {_short(donor)}",
                (epoch, value),
                fontsize=6,
                xytext=(0, -9),
                textcoords="offset points",
                ha="center",
            )
    shown: set[str] = set()
    for (status, style), lines in curves.items():
        label = "stopped early" if status == "stopped_early" else status
        colour = COLOURS.get(status, "#999999")
        ax.add_collection(
            LineCollection(lines, colors=colour, linestyles=style, alpha=0.85, label=None if label in shown else label)
        )
        shown.add(label)
        # Every epoch marked on a small sweep; on a large one, only trials of one epoch
        # (a line needs two points to show).
        points = [point for line in lines for point in line] if small else [line[0] for line in lines if len(line) == 1]
        if points:
            ax.scatter(*zip(*points, strict=True), s=9 if small else 4, color=colour, alpha=0.85, linewidths=0)
    for index, epoch in enumerate(rungs(sweep)):
        label = f"{sweep.config.scheduler.name} rungs" if not index else None
        ax.axvline(epoch, color="grey", ls=":", lw=1, label=label)
    ax.autoscale_view()
    ax.set(xlabel="epoch", ylabel=sweep.metric, title=f"{sweep.label}: every trial, coloured by how it ended")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    _legend(ax, "lower right" if sweep.maximise else "upper right")
    return fig


def _legend(ax: Any, corner: str) -> None:
    """The legend at a fixed corner, each label once ("best", matplotlib's default, tests
    every position against every line: over a second for a large sweep)."""
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc=corner)


def _axis_position(spec: ParamSpec | None, values: list[Any]) -> tuple[list[float], list[tuple[float, str]]]:
    """Values on a 0-1 axis and the axis's tick labels: log for log ranges, slots for choices."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if spec is not None and spec.kind in ("choice", "grid") or not numeric:
        levels = sorted({json.dumps(v) for v in values}, key=_level_order)
        at = {level: (i / (len(levels) - 1) if len(levels) > 1 else 0.5) for i, level in enumerate(levels)}
        return [at[json.dumps(v)] for v in values], [(at[level], level.strip('"')) for level in levels]
    log = spec is not None and spec.kind in ("loguniform", "qloguniform") and min(values) > 0
    scale = [math.log10(v) if log else float(v) for v in values]
    low, high = min(scale), max(scale)
    span = high - low or 1.0
    ticks = [(0.0, f"{min(values):.3g}"), (1.0, f"{max(values):.3g}")] if high > low else [(0.5, f"{values[0]:.3g}")]
    return [(s - low) / span if high > low else 0.5 for s in scale], ticks


def _level_order(level: str) -> tuple[int, Any]:
    """Numbers by value, then everything else by its text."""
    value = json.loads(level)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if numeric else (1, 0, level)


def plot_parallel(sweep: Sweep) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    fig, ax = _figure(8.0, 3.8)
    rows = [t for t in sweep.trials if t.best_value is not None]
    axes = list(sweep.searched) + [f"best {sweep.metric}"]
    columns = [[t.config.get(name) for t in rows] for name in sweep.searched] + [[t.best_value for t in rows]]
    specs: list[ParamSpec | None] = [*sweep.searched.values(), None]
    positions, ticks = zip(*(_axis_position(spec, col) for spec, col in zip(specs, columns, strict=True)), strict=True)
    values = [t.best_value for t in rows]
    norm = plt.Normalize(min(values), max(values) if max(values) > min(values) else min(values) + 1e-9)
    colour_map = plt.get_cmap("viridis" if sweep.maximise else "viridis_r")
    order = sorted(range(len(rows)), key=lambda i: values[i] if sweep.maximise else -values[i])  # best on top
    lines = [[(a, positions[a][i]) for a in range(len(axes))] for i in order]
    ax.add_collection(LineCollection(lines, colors=[colour_map(norm(values[i])) for i in order], lw=1.8, alpha=0.9))
    for a in range(len(axes)):
        ax.axvline(a, color="black", lw=0.8)
        for at, text in ticks[a]:
            ax.annotate(text, (a, at), fontsize=7, xytext=(3, 0), textcoords="offset points", va="center")
    ax.set_xticks(range(len(axes)), axes, fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(axes) - 0.6)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{sweep.label}: hyperparameters against best {sweep.metric}")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=colour_map), ax=ax, label=f"best {sweep.metric}")
    return fig


def plot_importance(sweep: Sweep, found: Importance) -> Any:
    fig, ax = _figure(7.0, 0.9 + 0.45 * max(1, len(found.values)))
    if found.values:
        names = list(found.values)[::-1]
        ax.barh(names, [found.values[n] for n in names], color=COLOURS["interrupted"])
        for y, name in enumerate(names):
            ax.annotate(
                f"{found.values[name]:.2f}",
                (found.values[name], y),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_xlim(0, 1.1)
        ax.set_xlabel("share of the metric's variance (fANOVA)")
    else:
        ax.text(0.5, 0.5, f"no importance: {found.note}", ha="center", va="center", fontsize=9, wrap=True)
        ax.set_axis_off()
    basis = f" (fANOVA over {found.trials} trials)" if found.values else ""
    ax.set_title(f"{sweep.label}: hyperparameter importance{basis}", fontsize=10)
    return fig


def plot_timeline(sweep: Sweep) -> tuple[Any, float]:
    """The Gantt chart of trials over slots; and the share of slot time left idle."""
    from matplotlib.patches import Patch

    bars, slots = slot_bars(sweep)
    fig, ax = _figure(8.0, 1.2 + 0.45 * slots)
    groups: dict[tuple[str, bool, int], list[Bar]] = {}
    for bar in bars:  # one collection per slot, colour and hatch: thousands of trials draw as fast as a few
        groups.setdefault((bar.status, bar.open, bar.slot), []).append(bar)
    for (status, open_, slot), members in groups.items():
        ax.broken_barh(
            [(b.start / 60, (b.end - b.start) / 60) for b in members],
            (slot - 0.35, 0.7),
            color=COLOURS.get(status, "#999999"),
            edgecolor="black",
            lw=0.5 if len(bars) <= LABELLED_TRIALS else 0.1,
            hatch="//" if open_ else None,
        )
    named = _labelled(sweep)
    for bar in bars:
        if bar.trial_id in named:
            ax.text((bar.start + bar.end) / 120, bar.slot, _short(bar.trial_id), ha="center", va="center", fontsize=7)
    span = max([b.end for b in bars] + [1e-9])
    busy = sum(b.end - b.start for b in bars)
    idle = max(0.0, 1 - busy / (slots * span))
    ax.set_xlim(left=0)  # from the sweep's start: time before the first trial is idle too
    ax.set_yticks(range(slots), [f"slot {i + 1}" for i in range(slots)])
    ax.set_xlabel("wall time (minutes since the sweep started)")
    ax.set_title(f"{sweep.label}: trials over {slots} slot(s); {idle:.0%} of slot time idle", fontsize=10)
    ax.invert_yaxis()
    states = sorted({b.status for b in bars})
    handles = [Patch(color=COLOURS.get(s, "#999999"), label=s.replace("_", " ")) for s in states]
    if any(b.open for b in bars):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="no end recorded (yet)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    return fig, idle


# --- the page -------------------------------------------------------------------------------------
def _svg_and_png(fig: Any, png: Path, written: list[Path]) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    data = io.BytesIO()
    fig.savefig(data, format="png", dpi=110)
    plt.close(fig)
    store.write_atomic(png, data.getvalue())
    written.append(png)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


def _figure_html(svg: str, caption: str, png: str) -> str:
    return (
        f'<figure class="plot">{svg}<figcaption>{html.escape(caption)} '
        f'<a href="{html.escape(png)}">PNG</a></figcaption></figure>'
    )


def _table(sweep: Sweep) -> str:
    epoch = common_epoch(sweep)
    heads = ["trial", "ended", "epochs", f"best {sweep.metric}", "at epoch", f"{sweep.metric} at epoch {epoch}"]
    heads += list(sweep.searched) + ["train minutes"]
    bars, _ = slot_bars(sweep)
    minutes = {t.trial_id: sum(b.end - b.start for b in bars if b.trial_id == t.trial_id) / 60 for t in sweep.trials}
    body = []
    for trial in sweep.trials:
        at_epoch = value_at(sweep, trial.trial_id, epoch)
        cells = [
            trial.trial_id,
            sweep.ended_label(trial) + (f": {trial.error}" if trial.error else ""),
            trial.epochs,
            trial.best_value,
            trial.best_epoch,
            at_epoch,
            *[trial.config.get(name) for name in sweep.searched],
            round(minutes[trial.trial_id], 2),
        ]
        row = []
        for cell in cells:
            if isinstance(cell, float):
                row.append(f'<td data-v="{cell!r}">{cell:.4g}</td>')
            elif isinstance(cell, int) and not isinstance(cell, bool):
                row.append(f'<td data-v="{cell}">{cell}</td>')
            else:
                row.append(f"<td>{html.escape('' if cell is None else str(cell))}</td>")
        body.append("<tr>" + "".join(row) + "</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    return f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


SORT_SCRIPT = """
document.querySelectorAll("table.trials").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var rows = Array.from(table.tBodies[0].rows);
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      function key(row) {
        var cell = row.cells[column];
        var v = cell.getAttribute("data-v");
        return v === null ? cell.textContent : parseFloat(v);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return up ? order : -order;
      });
      rows.forEach(function (row) { table.tBodies[0].appendChild(row); });
    });
  });
  table.setAttribute("data-sortable", "ready");
});
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.sweeps { display: grid; gap: 2em; grid-template-columns: repeat(auto-fit, minmax(640px, 1fr)); }
figure.plot { margin: 0.8em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
table.trials { border-collapse: collapse; font-size: 0.85em; }
table.trials th, table.trials td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }
table.trials th { background: #f0f0f0; cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
.facts { font-size: 0.9em; } .facts td { padding: 0.1em 1em 0.1em 0; }
"""


def _facts(sweep: Sweep) -> str:
    counts: dict[str, int] = {}
    for trial in sweep.trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    best = max if sweep.maximise else min
    reported = [t.best_value for t in sweep.trials if t.best_value is not None]
    spent = sum(len(rows) for rows in sweep.histories.values())
    rows = [
        ("state", "finished" if sweep.finished else "not finished (running, or interrupted: resume continues it)"),
        (
            "trials",
            f"{len(sweep.trials)} of {sweep.config.total_trials}: "
            + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items())),
        ),
        (
            "search",
            f"searcher {sweep.config.searcher.name}, scheduler {sweep.config.scheduler.name}, "
            f"{sweep.config.mode}imise {sweep.metric}",
        ),
        ("best", f"{best(reported):.4f}" if reported else "-"),
        ("epochs spent", f"{spent} of at most {sweep.config.total_trials * sweep.config.max_epochs}"),
        ("folder", sweep.paths.where),
    ]
    return (
        '<table class="facts">'
        + "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


def _section(sweep: Sweep, out: Path, prefix: str, written: list[Path]) -> str:
    found = importance(sweep)
    parts = [f"<section><h2>{html.escape(sweep.label)}</h2>", _facts(sweep)]
    name = f"{prefix}best_so_far.png"
    if len(prefix) == 0:  # one sweep: its best-so-far leads its section (a comparison shows both at the top)
        parts.append(
            _figure_html(
                _svg_and_png(plot_best_so_far([sweep]), out / name, written),
                f"Best {sweep.metric} so far against wall time and against epochs spent; dots where it improved.",
                name,
            )
        )
    name = f"{prefix}learning_curves.png"
    rung_text = {
        "asha": "dotted lines are ASHA's rungs, where a trial continues only if it is in the top 1/reduction_factor",
        "hyperband": "dotted lines are HyperBand's rungs",
        "bohb": "dotted lines are HyperBand's rungs",
        "median": "the dotted line is where the median rule starts stopping trials",
        "pbt": "stars mark PBT's exploits, where a trial continued from a better trial's checkpoint",
    }.get(sweep.config.scheduler.name, "the scheduler stops no trial early")
    parts.append(
        _figure_html(
            _svg_and_png(plot_learning_curves(sweep), out / name, written),
            f"{sweep.metric} per epoch of every trial, coloured by how it ended; {rung_text}.",
            name,
        )
    )
    if sweep.searched and any(t.best_value is not None for t in sweep.trials):
        name = f"{prefix}parallel.png"
        parts.append(
            _figure_html(
                _svg_and_png(plot_parallel(sweep), out / name, written),
                "Parallel coordinates: one line per trial through its searched hyperparameters "
                f"to its best {sweep.metric}; log ranges on log axes.",
                name,
            )
        )
    name = f"{prefix}importance.png"
    parts.append(
        _figure_html(
            _svg_and_png(plot_importance(sweep, found), out / name, written),
            f"Hyperparameter importance: {found.method}." + (f" Not computed: {found.note}." if found.note else ""),
            name,
        )
    )
    name = f"{prefix}timeline.png"
    fig, _ = plot_timeline(sweep)
    parts.append(
        _figure_html(
            _svg_and_png(fig, out / name, written),
            "Trials over the sweep's slots (trials that can run at once) in time; gaps are "
            "idle slots; hatched bars have no end recorded (still running, or cut off).",
            name,
        )
    )
    parts.append("<h3>Trials</h3><p class='facts'>Click a column to sort.</p>" + _table(sweep) + "</section>")
    return "\n".join(parts)


def write(sweeps: list[Sweep], out: Path) -> list[Path]:
    """The page and its PNGs in ``out`` (other files there are left alone); returns the
    files written, the page first."""
    written: list[Path] = []
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    title = " vs ".join(s.label for s in sweeps)
    body = [
        f"<h1>tuner report: {html.escape(title)}</h1><p class='facts'>made {generated} by python -m tuner report</p>"
    ]
    if len(sweeps) > 1:
        if len({s.metric for s in sweeps}) > 1 or len({s.config.mode for s in sweeps}) > 1:
            raise TunerError(
                "report: the sweeps optimise different metrics ("
                + ", ".join(f"{s.label}: {s.config.mode} {s.metric}" for s in sweeps)
                + "); compare sweeps of one metric"
            )
        body.append(
            _figure_html(
                _svg_and_png(plot_best_so_far(sweeps), out / "best_so_far.png", written),
                f"Best {sweeps[0].metric} so far of each sweep against wall time and against epochs spent.",
                "best_so_far.png",
            )
        )
    sections = [_section(s, out, f"{i + 1}_" if len(sweeps) > 1 else "", written) for i, s in enumerate(sweeps)]
    body.append('<div class="sweeps">' + "".join(sections) + "</div>")
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>tuner report: {html.escape(title)}'
        f"</title><style>{STYLE}</style></head><body>{''.join(body)}<script>{SORT_SCRIPT}</script></body></html>"
    )
    store.write_atomic(out / "report.html", page)
    return [out / "report.html", *written]


def default_out(sweeps: list[Sweep]) -> Path:
    first = sweeps[0]
    if first.paths.remote:
        raise TunerError(
            f"report: {first.paths.remote} is a storage URI; give --out DIR for the report (it is logged to MLflow too)"
        )
    if len(sweeps) == 1:
        return first.paths.root / "report"
    return first.paths.root / "report" / f"vs-{sweeps[1].label}"
