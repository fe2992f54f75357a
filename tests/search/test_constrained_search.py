"""Constraints in the search (issue 42): Optuna's TPE, GP and NSGA-II are told each trial's
constraint values (``Trial.set_constraint``) before ``study.tell`` and search where they hold;
every other searcher only has its trials filtered, and the plan line says which."""

from __future__ import annotations

import pytest

from tuner.driver.plan import constraints_line
from tuner.search.base import Evaluated
from tuner.search.optuna_searcher import optuna_search, warm_start
from tuner.sweepfile.schema import SweepConfig


def _sweep(sampler: str = "tpe", constraints: list[str] | None = None, **searcher) -> SweepConfig:
    """A user's function reporting ``score`` (best at max) and ``cost``, over x and y in [0, 1]."""
    return SweepConfig.model_validate(
        {
            "name": "constrained",
            "trainable": "my_train:train",
            "metric": "score",
            "mode": "max",
            "space": {"params": {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}}},
            "constraints": ["cost <= 0.3"] if constraints is None else constraints,
            "searcher": {"name": "optuna", "sampler": sampler, "n_startup_trials": 8, **searcher},
        }
    )


def _run(search, trials: int) -> list[float]:
    """Ray Tune's calls to the searcher, trial by trial: the x each trial was given."""
    given = []
    for number in range(trials):
        trial_id = f"t{number}"
        config = search.suggest(trial_id)
        result = {"score": config["x"] + 0.1 * config["y"], "cost": config["x"], "training_iteration": 1}
        search.on_trial_result(trial_id, result)
        search.on_trial_complete(trial_id, result)
        given.append(config["x"])
    return given


@pytest.mark.parametrize("sampler, models", [("tpe", True), ("gp", True), ("nsga2", True), ("cmaes", False),
                                             ("qmc", False), ("random", False)])  # fmt: skip
def test_optunas_samplers_that_read_constraints_model_them_and_the_plan_line_says_so(sampler, models):
    sweep = _sweep(sampler)
    assert sweep.searcher.models_constraints() is models
    line = constraints_line(sweep)
    assert line.startswith("  constraints cost <= 0.3: ")
    assert ("modelled by searcher optuna" in line) is models
    assert ("cannot model them, so they only filter" in line) is not models
    assert line.endswith("; the best is the best trial that meets them")


def test_a_searcher_other_than_optuna_only_filters():
    sweep = SweepConfig.model_validate(
        {"name": "x", "constraints": ["params < 200000"], "space": {"params": {"lr": {"loguniform": [1e-4, 1e-2]}}}}
    )
    assert not sweep.searcher.models_constraints()
    assert "searcher random cannot model them, so they only filter" in constraints_line(sweep)


def test_each_trial_is_told_its_constraint_values_from_its_last_reports_before_tell():
    search = optuna_search(_sweep("tpe", ["cost <= 0.3", "memory < 5"]), "tpe")
    config = search.suggest("a")
    search.on_trial_result("a", {"score": 1.0, "cost": 0.5, "memory": 1.0, "training_iteration": 1})
    search.on_trial_complete("a", {"score": 1.0, "cost": config["x"], "training_iteration": 2})  # memory: epoch 1's
    search.suggest("b")
    search.on_trial_complete("b", {"score": 1.0, "training_iteration": 1})  # reported neither: infeasible
    search.suggest("c")
    search.on_trial_complete("c", None, error=True)  # failed: told nothing, as Optuna leaves a failed trial
    a, b, c = search._ot_study.trials
    assert a.constraints == {"cost <= 0.3": pytest.approx(config["x"] - 0.3), "memory < 5": -4.0}
    assert b.constraints == {"cost <= 0.3": 1.0, "memory < 5": 5.0}
    assert c.constraints == {} and c.state.name == "FAIL"


def test_a_sampler_that_cannot_model_them_is_not_told():
    search = optuna_search(_sweep("random"), "random")
    _run(search, 3)
    assert all(trial.constraints == {} for trial in search._ot_study.trials)


def test_tpe_told_the_constraints_keeps_to_where_they_hold():
    """score grows with x, cost is x: unconstrained, TPE climbs to x near 1; told cost <= 0.3,
    its proposals after the random start stay mostly under 0.3, and it finds the boundary."""
    constrained = _run(optuna_search(_sweep("tpe"), "tpe"), 40)
    free = _run(optuna_search(_sweep("tpe", []), "tpe"), 40)
    inside, inside_free = sum(x <= 0.3 for x in constrained[20:]), sum(x <= 0.3 for x in free[20:])
    assert inside >= 8 and inside >= 2 * inside_free, (inside, inside_free)
    assert max(x for x in constrained if x <= 0.3) > 0.25  # close to the best feasible point, x = 0.3


def test_a_warm_start_tells_the_earlier_trials_constraint_values_too():
    """GP needs every trial's constraint values or none: an earlier trial comes with this sweep's."""
    search = optuna_search(_sweep("gp"), "gp")
    told, outside = warm_start(search, [Evaluated({"x": 0.5, "y": 0.5}, (0.55,), {"cost <= 0.3": 0.2})])
    assert (told, outside) == (1, 0)
    assert search._ot_study.trials[0].constraints == {"cost <= 0.3": 0.2}


def test_the_experiment_file_shows_constraints_modelled_by_tpe():
    from tuner.sweepfile.load import load_sweep

    sweep = load_sweep("mnist_constraints")
    assert sweep.constraints == ["params < 200000", "latency_ms <= 2"]
    assert sweep.searcher.sampler == "tpe" and sweep.searcher.models_constraints()


def test_an_earlier_sweeps_trial_comes_with_this_sweeps_constraint_values_for_a_searcher_that_models_them():
    from tuner.driver.warm_start import _constraint_values

    rows = [{"training_iteration": 1, "score": 0.5, "cost": 0.4}, {"training_iteration": 2, "score": 0.6}]
    assert _constraint_values(_sweep("tpe"), rows) == {"cost <= 0.3": pytest.approx(0.1)}
    assert _constraint_values(_sweep("tpe", ["cost <= 0.3", "memory < 2"]), rows)["memory < 2"] == 2.0
    assert _constraint_values(_sweep("cmaes"), rows) == {}  # not told: it cannot use them
    assert _constraint_values(_sweep("tpe", []), rows) == {}
