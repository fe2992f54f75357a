"""Several objectives: the Pareto front of a sweep's trials and the one point a rule picks.

Each trial is one point: its row at its best epoch by the first objective (the epoch
whose checkpoint is kept), when that row holds every objective. A point is on the front
when no other point is at least as good in every objective and better in one.

The rule (``select:`` in the sweep file) picks the exported point from the front:

- ``knee`` (the default): the point nearest the ideal one (best in every objective at
  once) after scaling each objective to [0, 1] over the front;
- ``{max: val_accuracy, where: "params < 200000"}``: the best point by one objective
  among those meeting every condition (``name op number``, joined by ``and``); the knee
  of the whole front when none meets them, and the rule says so.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w./-]*)\s*(<=|>=|==|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    value: float

    def holds(self, row: dict[str, Any]) -> bool:
        value = row.get(self.metric)
        return isinstance(value, (int, float)) and OPERATORS[self.op](value, self.value)


@dataclass(frozen=True)
class Rule:
    """How one point is taken from the front: ``by`` None is the knee."""

    by: str | None = None
    mode: str | None = None
    where: tuple[Condition, ...] = ()

    def describe(self) -> str:
        if self.by is None:
            return "knee (nearest the ideal point, each objective scaled over the front)"
        where = " and ".join(f"{c.metric} {c.op} {c.value:g}" for c in self.where)
        return f"{self.mode} {self.by}" + (f" where {where}" if where else "")


def parse_where(text: str) -> tuple[Condition, ...]:
    """``"params < 200000 and latency_ms <= 2"``; ValueError names the part it cannot read."""
    conditions = []
    for part in re.split(r"\s+and\s+", text.strip()):
        match = _CONDITION.match(part)
        if not match:
            raise ValueError(
                f"cannot read condition {part!r}; write name op number (op: <, <=, >, >=, ==), joined by 'and'"
            )
        conditions.append(Condition(match[1], match[2], float(match[3])))
    return tuple(conditions)


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every objective and better in one."""
    better = False
    for x, y, mode in zip(a, b, modes, strict=True):
        if (x < y) if mode == "max" else (x > y):
            return False
        if x != y:
            better = True
    return better


def front(points: list[Any], objectives: Sequence[tuple[str, str]]) -> list[Any]:
    """The points (anything with a ``row`` of metrics) no other point dominates, in their order."""
    modes = [mode for _, mode in objectives]
    values = [[float(p.row[m]) for m, _ in objectives] for p in points]
    return [p for i, p in enumerate(points) if not any(dominates(v, values[i], modes) for v in values)]


def choose(points: list[Any], objectives: Sequence[tuple[str, str]], rule: Rule) -> tuple[Any, str]:
    """The point ``rule`` picks from the front of ``points``, and the rule as applied (words)."""
    on_front = front(points, objectives)
    if not on_front:
        raise ValueError("no point to choose from")
    if rule.by is not None:
        meeting = [p for p in on_front if all(c.holds(p.row) for c in rule.where)]
        if meeting:
            pick = max if rule.mode == "max" else min
            return pick(meeting, key=lambda p: float(p.row[rule.by])), rule.describe()
        return _knee(on_front, objectives), f"knee, as no trial on the front meets {rule.describe()}"
    return _knee(on_front, objectives), rule.describe()


def _knee(on_front: list[Any], objectives: Sequence[tuple[str, str]]) -> Any:
    scaled = []
    for metric, mode in objectives:
        column = [float(p.row[metric]) for p in on_front]
        low, high = min(column), max(column)
        span = high - low or 1.0
        scaled.append([(v - low) / span if mode == "max" else (high - v) / span for v in column])
    distances = [math.dist([1.0] * len(objectives), [s[i] for s in scaled]) for i in range(len(on_front))]
    return on_front[distances.index(min(distances))]


def hypervolume(points: list[Sequence[float]], reference: Sequence[float], modes: Sequence[str]) -> float:
    """The volume the points dominate up to ``reference`` (2 objectives), for the benchmarks."""
    if len(modes) != 2:
        raise ValueError("hypervolume here takes two objectives")
    flipped = [[v if m == "min" else -v for v, m in zip(p, modes, strict=True)] for p in points]
    ref = [r if m == "min" else -r for r, m in zip(reference, modes, strict=True)]
    inside = sorted(p for p in flipped if p[0] < ref[0] and p[1] < ref[1])
    volume, best_y = 0.0, ref[1]
    for x, y in inside:
        if y < best_y:
            volume += (ref[0] - x) * (best_y - y)
            best_y = y
    return volume
