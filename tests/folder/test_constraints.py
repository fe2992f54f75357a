"""Constraints (issue 42): the one function that says whether a trial is feasible, its values
in Optuna's convention, and "best" among the feasible trials only."""

from __future__ import annotations

import math

import pytest

from tuner.folder import constraints, records
from tuner.sweepfile.schema import SweepConfig


def test_a_constraint_reads_as_metric_operator_number():
    assert constraints.parse("params < 200000") == constraints.Constraint("params", "<", 200000.0)
    assert constraints.parse("  latency_ms<=2.5 ") == constraints.Constraint("latency_ms", "<=", 2.5)
    assert constraints.parse("val_accuracy >= 9e-1") == constraints.Constraint("val_accuracy", ">=", 0.9)
    assert constraints.parse("loss/val > -1").text == "loss/val > -1"


@pytest.mark.parametrize(
    "text, says",
    [
        ("params", "cannot read it"),
        ("< 3", "cannot read it"),
        ("params == 3", "unknown operator '=='"),
        ("params => 3", "unknown operator '=>'"),
        ("params != 3", "unknown operator '!='"),
        ("params < many", "the bound 'many' is not a finite number"),
        ("params < inf", "the bound 'inf' is not a finite number"),
        (3, "a constraint is a string"),
    ],
)
def test_each_unreadable_constraint_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        constraints.parse(text)


@pytest.mark.parametrize(
    "text, value, expected",
    [
        ("params <= 100", 120, 20.0),  # past the bound by 20
        ("params <= 100", 80, -20.0),  # 20 inside it
        ("params <= 100", 100, 0.0),  # on the bound: feasible, as <= says
        ("params < 100", 100, math.ulp(0.0)),  # on a strict bound: the smallest violation, not 0
        ("val_accuracy >= 0.9", 0.8, pytest.approx(0.1)),
        ("val_accuracy > 0.9", 0.95, pytest.approx(-0.05)),
        ("latency_ms <= 2", None, 2.0),  # never reported: infeasible, |bound| past it
        ("val_loss < 0.5", None, 1.0),  # ... at least 1
    ],
)
def test_optunas_value_is_how_far_past_the_bound_and_positive_only_when_it_fails(text, value, expected):
    constraint = constraints.parse(text)
    assert constraint.violation(value) == expected
    assert (constraint.violation(value) <= 0) == constraint.holds(value)


def test_a_trial_is_judged_by_each_metrics_last_report_and_one_never_reported_fails():
    rows = [
        {"training_iteration": 1, "params": 150_000.0, "latency_ms": 3.0, "val_accuracy": 0.9},
        {"training_iteration": 2, "latency_ms": 1.5, "val_accuracy": 0.95},  # params reported once only
        {"training_iteration": 3, "latency_ms": float("nan")},  # NaN is no report: 1.5 stands
    ]
    both = [constraints.parse("params < 200000"), constraints.parse("latency_ms <= 2")]
    assert constraints.feasibility(both, rows).feasible
    tighter = [constraints.parse("params < 100000"), constraints.parse("latency_ms <= 1")]
    judged = constraints.feasibility(tighter, rows)
    assert judged.violated == ("params < 100000 (got 150000)", "latency_ms <= 1 (got 1.5)")
    assert judged.describe() == "infeasible: params < 100000 (got 150000); latency_ms <= 1 (got 1.5)"
    missing = constraints.feasibility([constraints.parse("memory_mb < 10")], rows)
    assert missing.violated == ("memory_mb < 10 (not reported)",)
    assert constraints.optuna_values(tighter, {"params": 150_000.0}) == {
        "params < 100000": 50_000.0,
        "latency_ms <= 1": 1.0,
    }


HISTORIES = {  # val_accuracy per epoch; the most accurate trial is the largest
    "big": [{"training_iteration": 1, "val_accuracy": 0.97, "params": 600_000.0}],
    "mid": [
        {"training_iteration": 1, "val_accuracy": 0.93, "params": 150_000.0},
        {"training_iteration": 2, "val_accuracy": 0.95, "params": 150_000.0},
    ],
    "small": [{"training_iteration": 1, "val_accuracy": 0.90, "params": 70_000.0}],
}


def test_the_best_is_the_best_feasible_trial_and_none_when_none_is():
    under = (constraints.parse("params < 200000"),)
    assert records.best_epoch(HISTORIES, "val_accuracy", "max").trial_id == "big"
    best = records.best_epoch(HISTORIES, "val_accuracy", "max", constraints=under)
    assert (best.trial_id, best.epoch, best.value) == ("mid", 2, 0.95)
    assert records.best_epoch(HISTORIES, "val_accuracy", "max", constraints=(constraints.parse("params < 1"),)) is None
    assert set(constraints.feasible_only(HISTORIES, under)) == {"mid", "small"}
    assert constraints.feasible_only(HISTORIES, ()) is HISTORIES


def test_several_objectives_choose_from_the_feasible_trials_only():
    two = [("val_accuracy", "max"), ("params", "min")]
    rule_free = records.best_epoch(HISTORIES, "val_accuracy", "max", two)
    assert rule_free is not None
    chosen = records.best_epoch(
        HISTORIES, "val_accuracy", "max", two, constraints=(constraints.parse("params < 100000"),)
    )
    assert chosen.trial_id == "small"


def test_the_sweep_asks_the_same_function_and_says_in_one_line_when_nothing_is_feasible():
    sweep = SweepConfig.model_validate({"name": "x", "constraints": ["params < 200000"]})
    assert sweep.best_epoch(HISTORIES).trial_id == "mid"
    assert sweep.nothing_feasible(HISTORIES) is None
    strict = SweepConfig.model_validate({"name": "x", "constraints": ["params < 1000", "val_loss < 1"]})
    assert strict.best_epoch(HISTORIES) is None
    assert strict.nothing_feasible(HISTORIES) == (
        "no trial meets the constraints (params < 1000, val_loss < 1): all 3 that reported val_accuracy are infeasible"
    )
    assert strict.nothing_feasible({}) is None  # nothing reported yet: not a constraint's doing
    assert SweepConfig.model_validate({"name": "x"}).nothing_feasible(HISTORIES) is None
