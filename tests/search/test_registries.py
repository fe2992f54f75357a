"""The scheduler and searcher registries: every entry builds the right Tune object from a
valid sweep, the registries and the config schema agree on the names, and every entry
survives the same short sequence of fake trials (Syne Tune's contract test, in small).

Only Tune's classes are used; Ray itself is never started.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import ValidationError
from ray.tune.experiment import Trial
from ray.tune.schedulers import (
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.schedulers.async_hyperband import AsyncHyperBandScheduler
from ray.tune.schedulers.pb2 import PB2
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter
from ray.tune.search.sample import Domain

from tuner.search import base, registry, spaces
from tuner.search.optuna_searcher import OPTUNA_SAMPLERS, optuna_sampler
from tuner.sweepfile import load
from tuner.sweepfile.schema import SweepConfig

METRIC, MODE = "val_accuracy", "max"
EPOCHS = 4

SCHEDULER_CLASSES = {
    "fifo": FIFOScheduler,
    "asha": AsyncHyperBandScheduler,  # what tune.schedulers.ASHAScheduler names
    "hyperband": HyperBandScheduler,  # tuner's subclass: tuner/search/tune_hyperband.py
    "median": MedianStoppingRule,
    "pbt": PopulationBasedTraining,
    "pb2": PB2,
    "bohb": HyperBandForBOHB,  # likewise
    "pruner": FIFOScheduler,  # Optuna's pruner answers the objective's should_prune(); Tune stops nothing
    "pasha": FIFOScheduler,  # tuner's own: tuner/search/tune_pasha.py
    "dehb": FIFOScheduler,  # tuner's own, stopping each trial at its DEHB job's epochs: tuner/search/tune_dehb.py
}


def searcher_class(name: str) -> type:
    if name in ("random", "grid"):
        return BasicVariantGenerator
    if name == "optuna":
        from tuner.search.tune_optuna import SpaceOptunaSearch  # Ray's, taking tuner's space define-by-run

        return SpaceOptunaSearch
    if name == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        return HyperOptSearch
    if name == "bohb":
        from ray.tune.search.bohb import TuneBOHB

        return TuneBOHB
    if name == "dehb":
        from tuner.search.tune_dehb import TuneDehb

        return TuneDehb
    raise KeyError(f"add searcher {name!r} to searcher_class() in this test")


# A space every model-based searcher can take: no grid, no quantization (bohb drops it).
PARAMS = {
    "lr": {"loguniform": [1.0e-4, 1.0e-2]},
    "dropout": {"uniform": [0.0, 0.5]},
    "conv1": {"randint": [8, 33]},
    "optimizer": {"choice": ["adam", "sgd"]},
    "momentum": 0.9,
}


def sweep_with(scheduler: str = "fifo", searcher: str = "random", **extra: Any) -> SweepConfig:
    """A valid sweep for a scheduler/searcher pair, with the partner each one needs."""
    for paired in ("bohb", "dehb"):
        if paired in (scheduler, searcher):
            scheduler = searcher = paired
    if scheduler == "pruner":  # an Optuna objective's: its space is its own
        return SweepConfig.model_validate(
            {
                "name": "registry_test",
                "objective": "study:objective",
                "mode": "max",
                "seed": 3,
                "train": {"epochs": EPOCHS},
                "scheduler": {"name": scheduler, **extra},
                "searcher": {"name": "optuna" if searcher == "random" else searcher},
            }
        )
    params = dict(PARAMS)
    if searcher == "grid":
        params["batch_size"] = {"grid": [64, 128]}
    return SweepConfig.model_validate(
        {
            "name": "registry_test",
            "seed": 3,
            "train": {"epochs": EPOCHS},
            "scheduler": {"name": scheduler, **extra},
            "searcher": {"name": searcher},
            "space": {"params": params},
        }
    )


def built_scheduler(sweep: Any) -> Any:
    """Ray Tune's scheduler, as the sweep's scheduler section builds it."""
    return sweep.scheduler.build(sweep)


def literal_names(union_annotation: Any) -> set[str]:
    """The ``name`` Literals of the models in a discriminated union (registry.SchedulerConfig, ...)."""
    union = typing.get_args(union_annotation)[0]
    names = set()
    for model in typing.get_args(union):
        names.update(typing.get_args(model.model_fields["name"].annotation))
    return names


# --- names --------------------------------------------------------------------------------
def test_scheduler_registry_matches_the_schema():
    assert set(registry.SCHEDULERS) == literal_names(registry.SchedulerConfig)
    assert set(SCHEDULER_CLASSES) == set(registry.SCHEDULERS)


# auto is no searcher of its own: validation replaces it by the one it picks (tuner/search/auto.py)
BUILT = sorted(name for name, kind in registry.SEARCHERS.items() if not kind.picks)


def test_searcher_registry_matches_the_schema():
    assert set(registry.SEARCHERS) == literal_names(registry.SearcherConfig)
    assert BUILT == sorted(set(registry.SEARCHERS) - {"auto"})


def test_registry_names_are_lower_case():
    for name in (*registry.SCHEDULERS, *registry.SEARCHERS):
        assert name == name.lower()


# --- building -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(registry.SCHEDULERS))
def test_every_scheduler_builds(name):
    sweep = sweep_with(scheduler=name)
    built = sweep.scheduler.build(sweep)
    assert type(built) is SCHEDULER_CLASSES[name] or type(built).__bases__ == (SCHEDULER_CLASSES[name],)
    assert built.set_search_properties(METRIC, MODE) is True
    assert built.metric == METRIC


def test_pbt_mutates_every_sampled_parameter_by_default():
    pbt = sweep_with("pbt")
    mutations = pbt.scheduler.mutated(pbt)
    assert set(mutations) == {"lr", "dropout", "conv1", "optimizer"}  # not the constant momentum
    assert all(isinstance(domain, Domain) for domain in mutations.values())


def test_pbt_takes_explicit_mutations():
    sweep = sweep_with("pbt", mutations={"lr": {"loguniform": [1.0e-4, 1.0e-1]}})
    mutations = sweep.scheduler.mutated(sweep)
    assert list(mutations) == ["lr"]
    assert mutations["lr"].upper == pytest.approx(1.0e-1)


@pytest.mark.parametrize(
    "scheduler, space",
    [
        pytest.param({"name": "pbt"}, {"use": "cnn"}, id="registry_space"),
        pytest.param({"name": "pbt", "mutations": {"lr": 0.01}}, {}, id="constant_mutation"),
        pytest.param({"name": "pbt", "mutations": {"lr": {"grid": [0.01, 0.1]}}}, {}, id="grid_mutation"),
        pytest.param({"name": "pbt"}, {"params": {"lr": {"grid": [0.01, 0.1]}}}, id="grid_only_space"),
    ],
)
def test_a_pbt_sweep_that_validates_can_be_built(scheduler, space):
    try:
        sweep = SweepConfig.model_validate(
            {"name": "t", "train": {"epochs": 3}, "scheduler": scheduler, "space": space}
        )
    except ValidationError:
        return  # refused at load: fine
    built = sweep.scheduler.build(sweep)
    assert isinstance(built, PopulationBasedTraining)
    mutations = sweep.scheduler.mutated(sweep)
    assert mutations
    assert all(isinstance(v, (Domain, list)) for v in mutations.values()), mutations


@pytest.mark.parametrize(
    "scheduler, space",
    [
        pytest.param({"name": "pbt"}, {"params": {"lr": {"grid": [0.01, 0.1]}, "momentum": 0.9}}, id="grid_only_space"),
        pytest.param({"name": "pbt"}, {"params": {"momentum": 0.9}}, id="constant_space"),
        pytest.param({"name": "pbt", "mutations": {"lr": 0.01}}, {}, id="constant_mutation"),
        pytest.param({"name": "pbt", "mutations": {"lr": {"grid": [0.01, 0.1]}}}, {}, id="grid_mutation"),
    ],
)
def test_a_pbt_sweep_with_nothing_to_mutate_is_refused(scheduler, space):
    refused = r"scheduler\.mutations(\.lr)?: pbt (needs something to mutate|mutates with)"
    with pytest.raises(ValidationError, match=refused):
        SweepConfig.model_validate({"name": "t", "train": {"epochs": 3}, "scheduler": scheduler, "space": space})


def unwrap(search_alg: Any) -> Any:
    """The searcher inside Tune's ConcurrencyLimiter, else the object itself."""
    return search_alg.searcher if isinstance(search_alg, ConcurrencyLimiter) else search_alg


@pytest.mark.parametrize("name", BUILT)
def test_every_searcher_builds(name):
    sweep = sweep_with(searcher=name)
    assert type(sweep.searcher.build(sweep, 2)) is searcher_class(name)
    built = registry.build_searcher(sweep, 2)
    assert type(unwrap(built)) is searcher_class(name)
    if built is not unwrap(built):
        assert built.max_concurrent == 2


# (the pruner scheduler answers an Optuna objective, whose space is its own: tests/sweepfile/test_objective.py)
@pytest.mark.parametrize("scheduler", [None, *sorted(set(registry.SCHEDULERS) - {"pruner"})])
def test_auto_with_any_scheduler_named_builds_a_pair_that_validates(scheduler):
    """``searcher: auto`` is in the registry's contract through what it picks: with any
    scheduler the file names (or none), the sweep validates and both halves build."""
    data = {"name": "registry_test", "train": {"epochs": EPOCHS}, "searcher": {"name": "auto"}}
    data["space"] = {"params": PARAMS}
    if scheduler is not None:
        data["scheduler"] = {"name": scheduler}
    sweep = SweepConfig.model_validate(data)
    assert sweep.searcher.name in registry.SEARCHERS and sweep.picked
    assert scheduler is None or sweep.scheduler.name == scheduler
    assert type(unwrap(registry.build_searcher(sweep, 2))) is searcher_class(sweep.searcher.name)
    assert sweep.scheduler.build(sweep).set_search_properties(METRIC, MODE) is True


def test_the_variant_generator_takes_only_the_users_concurrency_cap():
    # Resources decide how many trials run; a cap from them would starve HyperBand's brackets.
    built = registry.build_searcher(sweep_with(searcher="random"), 3)
    assert type(built) is BasicVariantGenerator
    assert built.max_concurrent == 0
    capped = SweepConfig.model_validate(
        {**sweep_with(searcher="random").model_dump(mode="json"), "trials": {"max_concurrent": 1}}
    )
    assert registry.build_searcher(capped, 3).max_concurrent == 1


# --- contract: every scheduler through the same fake trials ------------------------------------
class FakeController:
    """The part of Tune's TuneController that these schedulers call (no Ray behind it)."""

    search_alg = None

    def __init__(self, trials: list[Trial]):
        self.trials = trials

    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.status != Trial.TERMINATED]


def drive(
    scheduler: TrialScheduler, accuracies: list[Any], epochs: int = EPOCHS, sent: set[int] | None = None
) -> dict[str, tuple[int, str]]:
    """Report one result per epoch per running trial (only the epochs in ``sent``, where
    given); trial i scores ``accuracies[i]``, or ``accuracies[i][epoch - 1]`` for a curve.

    Returns each trial's last epoch and the decision it got there.
    """
    trials = [Trial("__fake", config={}, trial_id=f"t{i}", stub=True) for i in range(len(accuracies))]
    controller = FakeController(trials)
    for trial in trials:
        trial.status = Trial.RUNNING
        scheduler.on_trial_add(controller, trial)
    last: dict[str, tuple[int, str]] = {}
    for epoch in range(1, epochs + 1):
        for trial, accuracy in zip(trials, accuracies, strict=True):
            if trial.status != Trial.RUNNING or (sent is not None and epoch not in sent):
                continue
            value = float(accuracy[epoch - 1]) if hasattr(accuracy, "__len__") else accuracy
            result = {base.TIME_ATTR: epoch, METRIC: value, "time_total_s": float(epoch)}
            decision = scheduler.on_trial_result(controller, trial, result)
            assert decision in (TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP)
            last[trial.trial_id] = (epoch, decision)
            if decision == TrialScheduler.STOP:
                trial.status = Trial.TERMINATED
            elif decision == TrialScheduler.PAUSE:
                trial.status = Trial.PAUSED
    return last


# Trial t0 is best, t3 worst: the last (epoch, decision) of each, per scheduler. HyperBand,
# BOHB and PBT pause or clone trials through the controller's internals, so they are not
# driven here (the integration tests run them on a real Ray).
CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP
EXPECTED_LAST = {
    "fifo": {"t0": (EPOCHS, CONTINUE), "t3": (EPOCHS, CONTINUE)},
    # the worst stops at the grace period; the best runs until max_t = train.epochs stops it
    "asha": {"t0": (EPOCHS, STOP), "t3": (1, STOP)},
    "median": {"t0": (EPOCHS, CONTINUE), "t3": (1, STOP)},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_LAST))
def test_scheduler_contract_with_fake_trials(name):
    scheduler = built_scheduler(sweep_with(name))
    assert scheduler.set_search_properties(METRIC, MODE)
    last = drive(scheduler, [0.9, 0.7, 0.5, 0.3])
    assert {trial: last[trial] for trial in ("t0", "t3")} == EXPECTED_LAST[name]


def test_asha_never_stops_anyone_before_the_grace_period():
    scheduler = built_scheduler(sweep_with("asha", grace_period=2))
    scheduler.set_search_properties(METRIC, MODE)
    last = drive(scheduler, [0.9, 0.7, 0.5, 0.3])
    assert all(epoch >= 2 for epoch, _ in last.values())
    assert last["t3"] == (2, TrialScheduler.STOP)


class StoppingController(FakeController):
    """Also stops trials, as Tune's controller does for a scheduler, and takes BOHB's word
    to its searcher of each pause."""

    def __init__(self, trials: list[Trial], scheduler: TrialScheduler):
        super().__init__(trials)
        self.scheduler, self.stopped = scheduler, []
        self.search_alg = self.searcher = self  # BOHB: tune_controller.search_alg.searcher.on_pause(...)

    def on_pause(self, trial_id: str) -> None:
        pass

    def on_unpause(self, trial_id: str) -> None:
        pass

    def stop_trial(self, trial: Trial) -> None:
        if trial.status == Trial.PAUSED:
            self.scheduler.on_trial_remove(self, trial)
        trial.status = Trial.TERMINATED
        self.stopped.append(trial.trial_id)


@pytest.mark.parametrize("name", ["hyperband", "bohb"])
def test_hyperband_stops_a_trial_left_paused_after_its_bracket_let_it_go(name):
    """The state a sweep hung in under load (issue 23): HyperBand stopped a paused trial (a
    loser of its bracket, or one of a finished bracket), then Tune marked it PAUSED again.
    Nothing would ever resume it; tuner's scheduler stops it. A trial paused to wait for the
    rest of its bracket is left alone."""
    scheduler = built_scheduler(sweep_with(name, reduction_factor=3))
    scheduler.set_search_properties(METRIC, MODE)
    trials = [Trial("__fake", config={}, trial_id=f"t{i}", stub=True) for i in range(5)]
    controller = StoppingController(trials, scheduler)
    for trial in trials:  # max_t 4, eta 3: brackets of 3 trials from epoch 1 and of 2 trials from epoch 4
        trial.status = Trial.RUNNING
        scheduler.on_trial_add(controller, trial)
    first = [t for t in trials if scheduler._trial_info[t][0]._n == 3]
    waiting, loser, last = first
    decisions = {}
    for trial, accuracy in ((waiting, 0.9), (loser, 0.1)):
        decisions[trial.trial_id] = scheduler.on_trial_result(controller, trial, {base.TIME_ATTR: 1, METRIC: accuracy})
        trial.status = Trial.PAUSED
    assert set(decisions.values()) == {TrialScheduler.PAUSE}
    scheduler.choose_trial_to_run(controller)
    assert controller.stopped == [], "a trial waiting for its bracket was stopped"

    # The last result halves the bracket: the loser is stopped, the winner unpaused.
    scheduler.on_trial_result(controller, last, {base.TIME_ATTR: 1, METRIC: 0.2})
    assert loser.trial_id in controller.stopped
    loser.status = Trial.PAUSED  # what Tune did under load: the stopped trial PAUSED again
    controller.stopped.clear()
    chosen = scheduler.choose_trial_to_run(controller)
    assert controller.stopped == [loser.trial_id] and loser.status == Trial.TERMINATED
    assert chosen is waiting, "the bracket's winner is still the one to run"


# --- contract: every model-based searcher suggests inside the space -----------------------------
MODEL_BASED = sorted(name for name, kind in registry.SEARCHERS.items() if kind.model_based and not kind.picks)


def suggestions(name: str, count: int) -> list[dict[str, Any]]:
    sweep = sweep_with(searcher=name)
    searcher = registry.build_searcher(sweep, 2)
    if sweep.searcher.holds_space(sweep):  # as Tune does: no param_space beside a searcher holding one
        searcher.set_search_properties(METRIC, MODE, {})
        assert unwrap(searcher).metric == METRIC and unwrap(searcher).mode == MODE
    else:
        assert searcher.set_search_properties(METRIC, MODE, spaces.to_param_space(sweep.param_specs()))
    suggested = []
    for index in range(count):
        trial_id = f"t{index}"
        suggestion = searcher.suggest(trial_id)
        suggested.append(suggestion)
        searcher.on_trial_complete(trial_id, {METRIC: 0.5 + 0.01 * index, base.TIME_ATTR: EPOCHS})
    return suggested


@pytest.mark.parametrize("name", MODEL_BASED)
def test_searcher_contract_suggests_inside_the_space(name):
    for suggestion in suggestions(name, 6):
        assert 1.0e-4 <= suggestion["lr"] <= 1.0e-2
        assert 0.0 <= suggestion["dropout"] <= 0.5
        assert 8 <= suggestion["conv1"] < 33 and float(suggestion["conv1"]).is_integer()
        assert str(suggestion["optimizer"]) in ("adam", "sgd")
        assert suggestion.get("momentum", 0.9) == 0.9


@pytest.mark.parametrize("name", MODEL_BASED)
def test_searcher_is_seeded_by_the_sweep(name):
    assert suggestions(name, 2) == suggestions(name, 2)


def first_points(sweep: SweepConfig, storage: str, count: int = 4) -> list[dict[str, Any]]:
    """The first configurations the random searcher (Tune's variant generator) gives a
    sweep, drawn as Tune draws them, without Ray: add_configurations, then next_trial."""
    from ray.tune.experiment import Experiment

    searcher = registry.build_searcher(sweep, 2)
    assert isinstance(searcher, BasicVariantGenerator)
    space = spaces.to_param_space(sweep.param_specs())
    searcher.add_configurations(
        Experiment("draws", lambda config: None, config=space, num_samples=count, storage_path=storage)
    )
    return [dict(searcher.next_trial().config) for _ in range(count)]


def test_the_random_searcher_draws_the_same_points_each_run_of_a_file_and_new_ones_for_a_new_seed(tmp_path):
    """experiments/mnist_asha.yaml (seed: 0) tries the same points every run; --set seed=N
    gives new ones."""
    import ray

    first = first_points(load.load_sweep("mnist_asha"), str(tmp_path / "first"))
    again = first_points(load.load_sweep("mnist_asha"), str(tmp_path / "again"))
    other = first_points(load.load_sweep("mnist_asha", ["seed=1"]), str(tmp_path / "other"))
    assert first == again
    assert len({point["lr"] for point in first}) == len(first)  # drawn, not one point repeated
    assert all(a["lr"] != b["lr"] for a, b in zip(first, other, strict=True))
    assert not ray.is_initialized()


def test_bohb_takes_the_keyword_tune_recurses_with():
    """Tune's HyperBandForBOHB calls ``self.choose_trial_to_run(controller, allow_recurse=False)``
    once it processed a bracket with no trial running; tuner's subclass must take the keyword
    (a Branin sweep of 108 trials in benchmarks/studies/search_quality.py failed there with a TypeError)."""
    scheduler = built_scheduler(sweep_with("bohb", reduction_factor=3))
    scheduler.set_search_properties(METRIC, MODE)
    trials = [Trial("__fake", config={}, trial_id=f"t{i}", stub=True) for i in range(3)]
    controller = StoppingController(trials, scheduler)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)  # PENDING, as Tune adds them
    assert scheduler.choose_trial_to_run(controller, allow_recurse=False) is trials[0]


@pytest.mark.parametrize(
    "grace, factor, brackets, epochs",
    [(1, 2, 1, 8), (1, 3, 1, 27), (2, 2.5, 1, 20), (1, 1.5, 3, 12), (3, 3, 2, 30)],
)
def test_asha_decides_alike_when_trials_send_it_only_the_epochs_it_acts_at(grace, factor, brackets, epochs):
    """A trial that keeps its own checkpoints sends Tune only the epochs its scheduler acts at
    and its last (tuner/trial/runner.py): Ray's ASHA must stop the same trials at the same
    epochs as when it sees every epoch, on learning curves that cross."""
    import numpy as np

    sweep = sweep_with("asha", grace_period=grace, reduction_factor=factor, brackets=brackets)
    sweep = sweep.model_copy(update={"train": sweep.train.model_copy(update={"epochs": epochs})})
    sends = sweep.scheduler.acts_at(sweep) | {sweep.max_epochs}
    assert len(sends) < epochs
    curves = np.random.default_rng(7).uniform(0.2, 0.9, size=(24, 1)) + np.random.default_rng(8).normal(
        0, 0.05, size=(24, epochs)
    ).cumsum(axis=1)

    def run(sent: set[int] | None) -> dict[str, tuple[int, str]]:
        np.random.seed(0)  # ASHA draws each trial's bracket from numpy's global generator
        scheduler = built_scheduler(sweep)
        scheduler.set_search_properties(METRIC, MODE)
        return drive(scheduler, list(curves), epochs, sent)

    every = run(None)
    assert len({epoch for epoch, _ in every.values()}) > 2  # trials stopped at several rungs
    assert run(sends) == every


def test_only_fifo_and_asha_let_a_trial_hold_its_epochs_back():
    """The schedulers that act on any report (median, PASHA, DEHB's stopper, Optuna's pruners)
    or by the clock need every epoch as it comes."""
    assert sweep_with("fifo").scheduler.acts_at(sweep_with("fifo")) == frozenset()
    asha = sweep_with("asha", grace_period=1, reduction_factor=2)
    assert asha.scheduler.acts_at(asha) == {1, 2, 4}  # EPOCHS = 4: the last is max_t's, sent anyway
    for name in ("median", "pasha", "dehb", "hyperband", "pbt"):
        sweep = sweep_with(name)
        assert sweep.scheduler.acts_at(sweep) is None, name


@pytest.mark.parametrize("sampler", OPTUNA_SAMPLERS)
def test_every_optuna_sampler_survives_tunes_pickling_and_copying(sampler):
    """Tune pickles the searcher, its sampler in it, into the Tuner's state at the start and
    into each searcher checkpoint, and copies it; Optuna 5.1's NSGA-II holds a thread lock,
    which made a two-objective sweep fail before its first trial. Each sampler, rebuilt,
    still proposes, its lock (where it has one) a new one."""
    import copy

    import optuna
    from ray import cloudpickle

    built = optuna_sampler(sampler, seed=0, n_startup_trials=2, population_size=4)
    directions = ["maximize", "minimize"] if sampler == "nsga2" else ["maximize"]

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        return (x, 1 - x) if len(directions) == 2 else x

    for rebuilt in (cloudpickle.loads(cloudpickle.dumps(built)), copy.deepcopy(built)):
        assert type(rebuilt) is type(built)
        for key, value in vars(built).items():
            if type(value).__name__ in ("lock", "RLock"):
                assert type(getattr(rebuilt, key)) is type(value) and getattr(rebuilt, key) is not value
        study = optuna.create_study(directions=directions, sampler=rebuilt)
        study.optimize(objective, n_trials=6)
        assert len(study.trials) == 6 and all(0 <= t.params["x"] <= 1 for t in study.trials)
