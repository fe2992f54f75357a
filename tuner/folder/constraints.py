"""Constraints on what a trial reports (``constraints: ["params < 200000", "latency_ms <= 2"]``):
the one place that decides whether a trial is feasible, asked by "best" (records.best_epoch),
status, the report, MLflow and the searcher.

A trial is judged by each constrained metric's last reported value (a metric reported once,
such as ``params``, counts for every later epoch), as Optuna judges a trial by the
constraint values set before ``study.tell``. A trial that never reported a constrained
metric is infeasible: nothing shows that it meets it.

Each constraint's value in Optuna's convention (``Trial.set_constraint``: <= 0 is feasible)
is how far the reported value is past its bound: ``value - bound`` for ``<``/``<=``,
``bound - value`` for ``>``/``>=``. Optuna cannot tell ``<`` from ``<=``, so for a strict
operator the bound itself is given the smallest positive value (infeasible, as here).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FORM = re.compile(r"^\s*([A-Za-z_][\w./-]*)\s*([<>=!~]+)\s*(\S.*?)\s*$")
EXAMPLE = "write '<metric> <op> <number>' with op one of <, <=, >, >=, e.g. 'params < 200000'"


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.metric} {self.op} {number_text(self.bound)}"

    def holds(self, value: float | None) -> bool:
        return value is not None and OPERATORS[self.op](value, self.bound)

    def violation(self, value: float | None) -> float:
        """Optuna's constraint value: <= 0 when ``value`` meets it. Never reported: as far
        past the bound as the bound is from 0 (at least 1), finite so that GP can model it."""
        if value is None:
            return max(1.0, abs(self.bound))
        past = value - self.bound if self.op in ("<", "<=") else self.bound - value
        if past == 0 and self.op in ("<", ">"):
            return math.ulp(0.0)
        return past


def number_text(value: float) -> str:
    """``2371562`` for a count, ``0.1234`` for a measure: a number as the constraints' lines show it."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def parse(text: Any) -> Constraint:
    """``"params < 200000"``; ValueError says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"a constraint is a string; {EXAMPLE}")
    match = _FORM.match(text)
    if not match:
        raise ValueError(f"cannot read it; {EXAMPLE}")
    metric, op, bound = match.groups()
    if op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}; use one of <, <=, >, >=")
    try:
        number = float(bound)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"the bound {bound!r} is not a finite number")
    return Constraint(metric, op, number)


def last_values(rows: Iterable[dict[str, Any]], metrics: Iterable[str]) -> dict[str, float]:
    """Each of ``metrics``' last reported number in ``rows`` (NaN is not a report)."""
    wanted = set(metrics)
    values: dict[str, float] = {}
    for row in rows:
        for name in wanted:
            value = row.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                values[name] = float(value)
    return values


@dataclass(frozen=True)
class Feasibility:
    violated: tuple[str, ...] = ()  # ``params < 200000 (got 421642)``, ``latency_ms <= 2 (not reported)``

    @property
    def feasible(self) -> bool:
        return not self.violated

    def describe(self) -> str:
        return "feasible" if self.feasible else "infeasible: " + "; ".join(self.violated)


def feasibility(constraints: Sequence[Constraint], rows: Iterable[dict[str, Any]]) -> Feasibility:
    """Whether a trial's reports (its history rows, in order) meet every constraint."""
    values = last_values(rows, (c.metric for c in constraints))
    violated = []
    for constraint in constraints:
        value = values.get(constraint.metric)
        if not constraint.holds(value):
            got = "not reported" if value is None else f"got {number_text(value)}"
            violated.append(f"{constraint.text} ({got})")
    return Feasibility(tuple(violated))


def optuna_values(constraints: Sequence[Constraint], values: dict[str, float]) -> dict[str, float]:
    """Each constraint's value for ``Trial.set_constraint``, keyed by its text."""
    return {c.text: c.violation(values.get(c.metric)) for c in constraints}


def feasible_only(
    histories: dict[str, list[dict[str, Any]]], constraints: Sequence[Constraint]
) -> dict[str, list[dict[str, Any]]]:
    """The histories of the trials that meet every constraint (all of them without any)."""
    if not constraints:
        return histories
    return {trial: rows for trial, rows in histories.items() if feasibility(constraints, rows).feasible}
