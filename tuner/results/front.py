"""Several objectives, as status, best and the report show them: the Pareto front of the
trials (each at its best epoch by the first objective) and the point the sweep's rule took."""

from __future__ import annotations

from typing import Any

from tuner.folder import pareto, records


def front(sweep: Any, histories: dict[str, list[dict[str, Any]]]) -> list[records.BestEpoch]:
    """The trials on the front, best first by the first objective."""
    points = records.pareto_points(histories, sweep.metric, sweep.mode, sweep.objective_pairs)
    on_front = pareto.front(points, sweep.objective_pairs)
    return sorted(on_front, key=lambda p: p.value, reverse=sweep.mode == "max")


def front_lines(sweep: Any, histories: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The front as a table, the chosen point marked, and the rule; [] for one metric."""
    if not sweep.objectives:
        return []
    on_front = front(sweep, histories)
    if not on_front:
        return ["Pareto front: no trial has reported every objective yet"]
    chosen = sweep.best_epoch(histories)
    names = [metric for metric, _ in sweep.objective_pairs]
    heads = "".join(f"{f'{name} ({mode})':>22}" for name, mode in sweep.objective_pairs)
    lines = [
        f"Pareto front of {len(on_front)} trial(s) over {', '.join(names)}:",
        f"  {'trial':<12}{'epoch':>6}{heads}",
    ]
    for point in on_front:
        mark = "  <- exported" if chosen is not None and point.trial_id == chosen.trial_id else ""
        values = "".join(f"{_short(point.row[name]):>22}" for name in names)
        lines.append(f"  {point.trial_id:<12}{point.epoch:>6}{values}{mark}")
    if chosen is not None:
        lines.append(f"  chosen by select: {chosen.rule}")
    return lines


def _short(value: float) -> str:
    return f"{value:.6g}" if isinstance(value, float) and not float(value).is_integer() else f"{value:.0f}"
