"""DEHB (tuner/search/dehb_core.py, tune_dehb.py) and PASHA (tune_pasha.py): the algorithms
against what their papers and the reference dehb package define, and their Ray Tune
objects as a sweep builds them. No Ray cluster: Tune's searcher and scheduler objects are
driven directly, as Tune's controller drives them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from ray.tune.schedulers import TrialScheduler

from tuner.search import registry
from tuner.search.base import Evaluated
from tuner.search.dehb_core import Dehb, UnitSpace
from tuner.search.pasha import levels
from tuner.search.spaces import parse_params
from tuner.search.tune_pasha import Pasha
from tuner.sweepfile.schema import SweepConfig

PARAMS = {
    "lr": {"loguniform": [1.0e-4, 1.0e-1]},
    "dropout": {"uniform": [0.0, 0.5]},
    "hidden": {"quniform": [32, 256, 32]},
    "conv1": {"randint": [8, 33]},
    "optimizer": {"choice": ["adam", "sgd", "adamw"]},
    "momentum": 0.9,
}


def sweep(scheduler: dict, searcher: dict, epochs: int = 9) -> SweepConfig:
    return SweepConfig.model_validate(
        {
            "name": "dehb_test",
            "seed": 5,
            "train": {"epochs": epochs},
            "scheduler": scheduler,
            "searcher": searcher,
            "space": {"params": PARAMS},
        }
    )


# --- DEHB, the algorithm ---------------------------------------------------------------------
def test_fidelities_and_brackets_are_hyperbands_as_the_reference_computes_them():
    dehb = Dehb(2, 1, 27, eta=3)
    assert dehb.fidelities == pytest.approx([1, 3, 9, 27])
    # bracket 0 is the widest: 27 jobs at 1 epoch, 9 at 3, 3 at 9, 1 at 27; then narrower ones
    assert dehb._bracket_plan(0) == ([0, 1, 2, 3], [27, 9, 3, 1])
    assert dehb._bracket_plan(1) == ([1, 2, 3], [9, 3, 1])  # the reference floors (levels / (s + 1))
    assert dehb._bracket_plan(2) == ([2, 3], [6, 2])
    assert dehb._bracket_plan(3) == ([3], [4])
    assert dehb.pop_sizes == {0: 27, 1: 9, 2: 6, 3: 4}  # each fidelity's largest rung


def test_the_first_bracket_halves_synchronously_promoting_the_best():
    dehb = Dehb(1, 1, 9, eta=3, seed=0)
    first = [dehb.ask() for _ in range(9)]
    assert {job.fidelity for job in first} == {0}
    for job in first:
        dehb.tell(job, float(job.config[0]))  # the smaller the better
    promoted = [dehb.ask() for _ in range(3)]
    assert {job.fidelity for job in promoted} == {1}
    best_three = sorted(float(job.config[0]) for job in first)[:3]
    assert sorted(float(job.config[0]) for job in promoted) == pytest.approx(best_three)


def test_a_bracket_waiting_on_results_lets_a_new_one_start_for_idle_workers():
    dehb = Dehb(1, 1, 9, eta=3, seed=0)
    jobs = [dehb.ask() for _ in range(10)]  # 9 out at 1 epoch, none back: the tenth opens bracket 1
    assert jobs[9].bracket == 1 and jobs[9].fidelity == 1


def test_dehb_finds_a_quadratics_minimum_better_than_random_search_at_the_same_epochs():
    def f(x: np.ndarray, fidelity: float) -> float:
        return float(((x - 0.3) ** 2).sum() + 0.05 / fidelity)  # low fidelity: biased, same ranking

    regrets, random_regrets = [], []
    for seed in range(5):
        dehb, spent = Dehb(4, 1, 9, eta=3, seed=seed), 0.0
        best = math.inf
        while spent < 300:
            job = dehb.ask()
            fidelity = dehb.fidelities[job.fidelity]
            spent += fidelity
            dehb.tell(job, f(job.config, fidelity))
        best = float(((dehb.incumbent - 0.3) ** 2).sum())
        rng = np.random.default_rng(seed)
        random_best = min(float(((rng.uniform(size=4) - 0.3) ** 2).sum()) for _ in range(300 // 9))
        regrets.append(best)
        random_regrets.append(random_best)
    assert np.median(regrets) < np.median(random_regrets) / 2


def test_a_failed_job_completes_its_bracket_without_a_value():
    dehb = Dehb(1, 1, 3, eta=3, seed=0)
    jobs = [dehb.ask() for _ in range(3)]  # bracket 0: 3 at 1 epoch (then 1 at 3)
    for job in jobs:
        dehb.tell(job, math.inf)
    assert dehb.incumbent is None
    assert dehb.ask().bracket == 0  # its rung is done, so bracket 0 goes on to its next rung


# --- the unit hypercube ----------------------------------------------------------------------
def test_every_kind_of_parameter_goes_to_the_unit_cube_and_back():
    space = UnitSpace(parse_params("space.params", PARAMS))
    config = {"lr": 0.003, "dropout": 0.2, "hidden": 96.0, "conv1": 17, "optimizer": "sgd", "momentum": 0.9}
    vector = space.vector(config)
    assert vector is not None and len(vector) == 5 and np.all((vector >= 0) & (vector <= 1))
    again = space.config(vector)
    assert again["lr"] == pytest.approx(0.003) and again["dropout"] == pytest.approx(0.2)
    assert {k: again[k] for k in ("hidden", "conv1", "optimizer", "momentum")} == {
        "hidden": 96.0,
        "conv1": 17,
        "optimizer": "sgd",
        "momentum": 0.9,
    }
    assert space.config(np.ones(5))["conv1"] == 32 and space.config(np.zeros(5))["optimizer"] == "adam"
    assert space.vector({**config, "lr": 0.5}) is None  # outside: no warm start from it
    assert space.vector({**config, "optimizer": "rmsprop"}) is None


# --- DEHB as Ray Tune runs it ----------------------------------------------------------------
def test_each_trial_runs_the_epochs_of_its_job_and_reports_back_at_them():
    s = sweep({"name": "dehb"}, {"name": "dehb"})
    search_alg = registry.build_searcher(s, 2)
    scheduler = registry.build_scheduler(s, search_alg)
    dehb = search_alg.searcher
    config = search_alg.suggest("t1")
    assert set(config) == set(PARAMS) and config["momentum"] == 0.9
    assert dehb.budget("t1") == 1  # bracket 0 starts at the smallest fidelity
    trial = SimpleNamespace(trial_id="t1")
    assert scheduler.on_trial_result(None, trial, {"training_iteration": 1, "val_accuracy": 0.5}) == (
        TrialScheduler.STOP
    )
    search_alg.on_trial_complete("t1", {"training_iteration": 1, "val_accuracy": 0.5})
    assert dehb.dehb.incumbent_fitness == -0.5  # maximised: DEHB minimises its negation


def test_dehb_resumes_where_it_stopped(tmp_path):
    s = sweep({"name": "dehb"}, {"name": "dehb"})
    first = registry.build_searcher(s, 2).searcher
    for i in range(5):
        first.suggest(f"t{i}")
        first.on_trial_complete(f"t{i}", {"training_iteration": 1, "val_accuracy": i / 10})
    first.suggest("t5")  # running when the sweep stopped
    path = str(tmp_path / "searcher.pkl")
    first.save(path)
    resumed = registry.build_searcher(s, 2).searcher
    resumed.restore(path)
    resumed.on_trial_complete("t5", {"training_iteration": 1, "val_accuracy": 0.9})
    first.on_trial_complete("t5", {"training_iteration": 1, "val_accuracy": 0.9})
    assert [resumed.suggest(f"n{i}") for i in range(8)] == [first.suggest(f"n{i}") for i in range(8)]


def test_a_warm_start_seeds_each_fidelity_with_the_earlier_trials_best_first():
    s = sweep({"name": "dehb"}, {"name": "dehb"})
    search_alg = registry.build_searcher(s, 2)
    base = {"lr": 0.003, "dropout": 0.2, "hidden": 96.0, "conv1": 17, "optimizer": "sgd", "momentum": 0.9}
    earlier = [
        Evaluated({**base, "dropout": 0.1}, (0.5, 0.6, 0.7)),
        Evaluated({**base, "dropout": 0.3}, (0.8,)),
        Evaluated({**base, "lr": 0.9}, (0.99,)),  # outside the space
    ]
    told, outside = s.searcher.tell_earlier(search_alg, earlier)
    assert (told, outside) == (2, 1)
    dehb = search_alg.searcher.dehb
    assert dehb.incumbent_fitness == -0.8
    assert list(dehb.subpops[0].fitness[:2]) == [-0.8, -0.5]  # at 1 epoch, best first
    assert dehb.subpops[1].fitness[0] == -0.7  # only the 3-epoch trial is known at 3 epochs


# --- PASHA -----------------------------------------------------------------------------------
def test_pashas_rungs():
    assert levels(1, 3, 27) == [1, 3, 9, 27]
    assert levels(1, 3, 10) == [1, 3, 9, 10]
    assert levels(1, 3, 2) == [1, 2]


def report(pasha: Pasha, trial: str, epoch: int, value: float) -> str:
    return pasha.on_trial_result(None, SimpleNamespace(trial_id=trial), {"training_iteration": epoch, "acc": value})


def test_pasha_stops_at_its_second_rung_while_the_ranking_holds():
    pasha = Pasha(metric="acc", mode="max", levels=[1, 3, 9, 27], reduction_factor=3, epsilon=0.0)
    for i, trial in enumerate(["a", "b", "c"]):  # curves that never cross: rankings agree
        for epoch in (1, 2):
            assert report(pasha, trial, epoch, 0.5 + 0.1 * i + 0.01 * epoch) == TrialScheduler.CONTINUE
        assert report(pasha, trial, 3, 0.5 + 0.1 * i + 0.03) == TrialScheduler.STOP
    assert pasha.levels[pasha.top] == 3


def test_pasha_raises_its_top_rung_when_the_top_two_rank_trials_differently():
    pasha = Pasha(metric="acc", mode="max", levels=[1, 3, 9, 27], reduction_factor=3, epsilon=0.0)
    report(pasha, "a", 1, 0.9)
    assert report(pasha, "a", 3, 0.5) == TrialScheduler.STOP  # nothing to compare yet
    report(pasha, "b", 1, 0.6)  # b below a at epoch 1 ...
    assert report(pasha, "b", 3, 0.8) == TrialScheduler.CONTINUE  # ... above it at 3: train further
    assert pasha.levels[pasha.top] == 9


def test_pashas_soft_ranking_ties_values_closer_than_epsilon():
    pasha = Pasha(metric="acc", mode="max", levels=[1, 3, 9], reduction_factor=3, epsilon=0.05)
    report(pasha, "a", 1, 0.61)
    report(pasha, "a", 3, 0.70)
    report(pasha, "b", 1, 0.60)
    assert report(pasha, "b", 3, 0.72) == TrialScheduler.STOP  # a swap inside epsilon is noise
    assert pasha.levels[pasha.top] == 3


def test_pasha_stops_the_worst_at_lower_rungs_as_asha_does():
    pasha = Pasha(metric="loss", mode="min", levels=[1, 3, 9], reduction_factor=2, epsilon=0.0)
    for trial, loss in (("a", 0.2), ("b", 0.3), ("c", 0.25)):
        pasha.on_trial_result(None, SimpleNamespace(trial_id=trial), {"training_iteration": 1, "loss": loss})
    result = {"training_iteration": 1, "loss": 0.9}
    assert pasha.on_trial_result(None, SimpleNamespace(trial_id="d"), result) == TrialScheduler.STOP


def test_pasha_estimates_epsilon_from_learning_curves_that_cross():
    pasha = Pasha(metric="acc", mode="max", levels=[1, 3, 9], reduction_factor=3)
    report(pasha, "a", 1, 0.50)
    report(pasha, "b", 1, 0.40)
    report(pasha, "a", 2, 0.55)
    report(pasha, "b", 2, 0.60)  # b overtakes a by 0.05 at epoch 2
    assert pasha.epsilon() == pytest.approx(0.05)


def test_pasha_builds_from_a_sweep_with_any_searcher():
    s = sweep({"name": "pasha", "reduction_factor": 3}, {"name": "optuna", "sampler": "tpe"}, epochs=10)
    pasha = registry.build_scheduler(s, registry.build_searcher(s, 2))
    assert pasha.levels == [1, 3, 9, 10] and pasha.metric == s.metric
