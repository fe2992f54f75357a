"""The side-by-side benchmark's figures (benchmarks/run.py, benchmarks/contestants/common.py): which
model a contestant held at a given second, and the summary over seeds. Pure functions
on hand-made results; no training, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "contestants")]

import common  # noqa: E402
import run  # noqa: E402


def test_improvements_keep_only_the_moments_the_best_so_far_rose_in_time_order():
    epochs = [(30.0, 0.97, "b"), (10.0, 0.95, "a"), (40.0, 0.96, "c"), (50.0, 0.97, "d"), (60.0, 0.99, "e")]
    assert common.improvements(epochs) == [(10.0, 0.95, "a"), (30.0, 0.97, "b"), (60.0, 0.99, "e")]


def test_scored_curve_scores_each_improvement_with_its_own_model():
    scored = []

    def test_accuracy(model: str) -> float:
        scored.append(model)
        return {"a": 0.90, "b": 0.93}[model]

    curve = common.scored_curve([(1.0, 0.91, "a"), (2.0, 0.90, "x"), (3.0, 0.94, "b")], test_accuracy)
    assert curve == [(1.0, 0.91, 0.90), (3.0, 0.94, 0.93)]
    assert scored == ["a", "b"]  # the model that never led is not scored


def test_best_at_gives_the_validation_and_test_accuracy_held_at_that_second():
    result = {"curve": [(5.0, 0.9), (8.0, 0.95)], "best_curve": [(5.0, 0.9, 0.91), (8.0, 0.95, 0.94)]}
    assert run.best_at(result, 4.9) == (None, None)
    assert run.best_at(result, 5.0) == (0.9, 0.91)
    assert run.best_at(result, 100.0) == (0.95, 0.94)
    # No scored models (a contestant that could not keep them): validation only.
    assert run.best_at({"curve": result["curve"]}, 6.0) == (0.9, None)


def _result(wall: float, best_curve: list[tuple[float, float, float]]) -> dict:
    return {
        "wall_s": wall,
        "compute_s": wall,
        "fit_span_s": wall,
        "start_to_first_step_s": [0.1],
        "end_to_next_start_s": [0.1],
        "images_per_s": [1000.0],
        "curve": [(at, val) for at, val, _ in best_curve],
        "best_curve": best_curve,
    }


def test_equal_wall_clock_is_taken_at_the_quicker_finish_and_at_shares_of_it():
    budget = common.Budget(suite="default", lrs=[1e-3], epochs=1, data_root="unused")
    results = {
        "tuner": _result(100.0, [(40.0, 0.95, 0.96), (90.0, 0.98, 0.97)]),
        "optuna_inprocess": _result(80.0, [(10.0, 0.97, 0.975)]),
    }
    figures = run.derive(results, budget)["tuner"]
    assert figures["wall_vs_optuna_inprocess"] == pytest.approx(1.25)
    at_end = figures["at_equal_wall_vs_optuna_inprocess"]
    assert at_end["seconds"] == pytest.approx(80.0)
    assert (at_end["tuner_best_val"], at_end["tuner_test"]) == (0.95, 0.96)  # its 90 s model came later
    assert (at_end["other_best_val"], at_end["other_test"]) == (0.97, 0.975)
    quarter = figures["at_25%_wall_vs_optuna_inprocess"]
    assert quarter["seconds"] == pytest.approx(20.0)
    assert quarter["tuner_best_val"] is None and quarter["other_best_val"] == 0.97


def test_across_seeds_gives_mean_min_max_and_counts_only_what_was_reached():
    budget = common.Budget(suite="default", lrs=[1e-3], epochs=1, data_root="unused")
    per_seed = [
        run.derive(
            {"tuner": _result(wall, [(50.0, val, val)]), "optuna_inprocess": _result(40.0, [(10.0, 0.9, 0.9)])},
            budget,
        )
        for wall, val in ((60.0, 0.97), (100.0, 0.99))
    ]
    summary = run.across_seeds(per_seed)["tuner"]
    assert summary["wall_vs_optuna_inprocess"] == {"mean": pytest.approx(2.0), "min": 1.5, "max": 2.5, "n": 2}
    at_end = summary["at_equal_wall_vs_optuna_inprocess"]
    assert at_end["tuner_best_val"] == {}  # at 40 s neither seed had a result yet
    assert at_end["other_test"]["n"] == 2
    table = run.seeds_table("default", {"tuner": summary})
    assert "| wall_vs_optuna_inprocess | 2.00 [1.50, 2.50] (n=2) |" in table
