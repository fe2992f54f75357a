"""The report's plots (matplotlib figures), drawn from ``report_data``'s numbers: best so
far, learning curves with rungs or exploits, parallel coordinates, importance, the
timeline. One collection per colour, so a 1,000-trial sweep draws as fast as a few."""

from __future__ import annotations

import json
import math
from typing import Any

from tuner.results.report_data import (
    Bar,
    Importance,
    Sweep,
    best_so_far,
    exploits,
    rungs,
    slot_bars,
)
from tuner.search.spaces import ParamSpec

INFEASIBLE_STYLE = ":"  # the learning curve of a trial that misses the sweep's constraints
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
        style = INFEASIBLE_STYLE if trial.feasible is False else style  # misses the sweep's constraints
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
        label += ", infeasible (misses the constraints)" if style == INFEASIBLE_STYLE else ""
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
    """Values on a 0-1 axis and the axis's tick labels: log for log ranges, slots for choices.
    A parameter of a conditional choice's branch, absent from the other branches' trials,
    puts those at the bottom ("-") and its values above."""
    present = [v for v in values if v is not None]
    if present and len(present) < len(values):
        positions, ticks = _axis_position(spec, present)
        scaled = iter(0.15 + 0.85 * p for p in positions)
        return [0.0 if v is None else next(scaled) for v in values], [(0.0, "-")] + [
            (0.15 + 0.85 * at, text) for at, text in ticks
        ]
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


def plot_pareto(sweep: Sweep) -> Any:
    """Several objectives: every trial at its best epoch by the first objective, on the first
    two objectives' axes; the front joined, the exported point starred."""
    from tuner.folder import records
    from tuner.results.front import front

    config = sweep.config
    (x_name, x_mode), (y_name, y_mode) = config.objective_pairs[:2]
    points = records.pareto_points(sweep.histories, config.metric, config.mode, config.objective_pairs)
    on_front = sorted(front(config, sweep.histories), key=lambda p: p.row[x_name])
    chosen = config.best_epoch(sweep.histories)
    fig, ax = _figure(6.5, 4.0)
    ax.scatter([p.row[x_name] for p in points], [p.row[y_name] for p in points], color="#bbbbbb", label="trial")
    ax.plot(
        [p.row[x_name] for p in on_front],
        [p.row[y_name] for p in on_front],
        "o-",
        color="#1f77b4",
        label="Pareto front",
    )
    for p in on_front:
        ax.annotate(
            _short(p.trial_id), (p.row[x_name], p.row[y_name]), fontsize=7, xytext=(4, 3), textcoords="offset points"
        )
    if chosen is not None:
        ax.plot(chosen.row[x_name], chosen.row[y_name], "*", color="#d62728", ms=16, label="exported")
    ax.set_xlabel(f"{x_name} ({x_mode})")
    ax.set_ylabel(f"{y_name} ({y_mode})")
    ax.set_title(f"{sweep.label}: Pareto front")
    _legend(ax, "best")
    return fig
