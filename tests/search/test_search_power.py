"""Issue 26's search side, without Ray: conditional spaces through every searcher that takes
one, Optuna's samplers, a warm start told to the searcher, what ``searcher: auto`` picks,
PB2's bounds, and the one-line refusals of combinations that cannot work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tuner.errors import ConfigError
from tuner.folder import pareto
from tuner.search import auto, base, optuna_searcher, registry, spaces
from tuner.search.tune_optuna import OptunaSpace
from tuner.sweepfile import load, schema, sections

METRIC, MODE = "val_accuracy", "max"

CONDITIONAL = {
    "optimizer": {
        "choice": {
            "sgd": {"momentum": {"uniform": [0.8, 0.99]}, "lr": {"loguniform": [1.0e-3, 1.0e-1]}},
            "adam": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}},
        }
    },
    "dropout": {"uniform": [0.0, 0.5]},
}


def sweep(params: dict[str, Any], searcher: dict[str, Any] | str = "random", **sections: Any) -> schema.SweepConfig:
    searcher = {"name": searcher} if isinstance(searcher, str) else searcher
    return schema.SweepConfig.model_validate(
        {"name": "search_test", "train": {"epochs": 4}, "searcher": searcher, "space": {"params": params}, **sections}
    )


def suggest(built: schema.SweepConfig, count: int) -> list[dict[str, Any]]:
    """What the sweep's searcher proposes for ``count`` trials, told a result after each."""
    search_alg = registry.build_searcher(built, 2)
    if built.searcher.holds_space(built):
        search_alg.set_search_properties(METRIC, MODE, {})
    else:
        search_alg.set_search_properties(METRIC, MODE, spaces.to_param_space(built.param_specs()))
    found = []
    for index in range(count):
        proposed = search_alg.suggest(f"t{index}")
        found.append(proposed)
        search_alg.on_trial_complete(f"t{index}", {METRIC: 0.5 + 0.01 * index, "training_iteration": 4})
    return found


# --- conditional spaces ---------------------------------------------------------------------------
def test_a_conditional_choice_parses_to_its_branches():
    spec = spaces.parse_param(CONDITIONAL["optimizer"])
    assert spec.kind == "branches"
    assert set(spec.branches) == {"sgd", "adam"}
    assert spec.branches["sgd"]["lr"] == spaces.ParamSpec("loguniform", (1.0e-3, 1.0e-1))
    assert spaces.parse_param({"choice": {"adam": None}}).branches == {"adam": {}}


def test_flatten_gives_the_branch_taken_and_its_parameters_as_plain_names():
    specs = {name: spaces.parse_param(value) for name, value in CONDITIONAL.items()}
    nested = {"optimizer": {"sgd": {"momentum": 0.9, "lr": 0.01}}, "dropout": 0.2}
    assert spaces.flatten(nested, specs) == {"optimizer": "sgd", "momentum": 0.9, "lr": 0.01, "dropout": 0.2}
    flat = spaces.flat_specs(specs)
    assert list(flat) == ["optimizer", "momentum", "lr", "dropout"]
    assert flat["optimizer"] == spaces.ParamSpec("choice", ("sgd", "adam"))


@pytest.mark.parametrize("searcher", ["random", "optuna", "hyperopt"])
def test_every_searcher_that_takes_a_conditional_space_gives_only_the_branch_taken(searcher):
    proposed = suggest(sweep(CONDITIONAL, searcher), 12)
    for trial in proposed:
        assert 0.0 <= trial["dropout"] <= 0.5
        if trial["optimizer"] == "sgd":
            assert set(trial) == {"optimizer", "momentum", "lr", "dropout"}
            assert 0.8 <= trial["momentum"] <= 0.99 and 1.0e-3 <= trial["lr"] <= 1.0e-1
        else:
            assert trial["optimizer"] == "adam"
            assert set(trial) == {"optimizer", "lr", "dropout"}
            assert 1.0e-4 <= trial["lr"] <= 1.0e-2
    assert {trial["optimizer"] for trial in proposed} == {"sgd", "adam"}
    assert proposed == suggest(sweep(CONDITIONAL, searcher), 12), "seeded by the sweep"


def test_a_nested_conditional_choice_reaches_the_trial_flat():
    params = {"optimizer": {"choice": {"sgd": {"lr_schedule": {"choice": {"step": None, "cosine": None}}}, "adam": {}}}}
    for proposed in suggest(sweep(params, "optuna"), 10):
        assert set(proposed) in ({"optimizer", "lr_schedule"}, {"optimizer"})
        assert ("lr_schedule" in proposed) == (proposed["optimizer"] == "sgd")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"searcher": "grid"},
            r"space.params.optimizer: a conditional choice needs searcher random, optuna or "
            r"hyperopt; searcher 'grid' cannot take one",
        ),
        ({"searcher": "bohb", "scheduler": {"name": "bohb"}}, r"searcher 'bohb' cannot take one"),
        ({"scheduler": {"name": "pbt"}}, r"space.params.optimizer: scheduler 'pbt' mutates parameters every trial"),
        ({"scheduler": {"name": "pb2"}}, r"scheduler 'pb2' mutates parameters every trial has"),
        (
            {"params": {**CONDITIONAL, "lr": 0.01}},
            r"space.params.optimizer.sgd.lr: 'lr' is already a parameter "
            r"outside this branch",
        ),
        (
            {"params": {"optimizer": {"choice": {"sgd": {"optimizer": "adam"}}}}},
            r"'optimizer' is already a "
            r"parameter outside this branch",
        ),
        (
            {"params": {"optimizer": {"choice": {"sgd": {"batch_size": {"grid": [32, 64]}}}}}},
            r"branch sgd: batch_size: grid values cannot be inside a conditional choice",
        ),
        (
            {"params": {"optimizer": {"choice": {"sgd": {"momentum": 2.0}}}}},
            r"space.params.optimizer.sgd.momentum: value 2.0 is invalid",
        ),
        (
            {"params": {"optimizer": {"choice": {"sgd": {"momentom": 0.9}}}}},
            r"space.params.optimizer.sgd.momentom: not a hyperparameter of model 'cnn'; did you mean 'momentum'",
        ),
        ({"params": {"optimizer": {"choice": {"rmsprop": {}}}}}, r"space.params.optimizer: value 'rmsprop' is invalid"),
        ({"params": {"optimizer": {"choice": {"sgd": [0.9]}}}}, r"choice branch 'sgd' maps to its parameters"),
    ],
    ids=[
        "grid",
        "bohb",
        "pbt",
        "pb2",
        "name-outside",
        "name-of-choice",
        "grid-inside",
        "bad-value",
        "unknown-name",
        "bad-branch",
        "branch-not-mapping",
    ],
)
def test_what_cannot_take_a_conditional_space_is_refused_in_one_line(change, message):
    searcher = change.get("searcher", "random")
    sections = {"scheduler": change["scheduler"]} if "scheduler" in change else {}
    with pytest.raises(Exception, match=message) as raised:
        sweep(change.get("params", CONDITIONAL), searcher, **sections)
    assert "\n" not in str(raised.value.errors()[0]["msg"])


def test_a_conditional_space_written_in_a_file_is_refused_with_its_line(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(
        "name: grid\nsearcher: {name: grid}\nspace:\n  params:\n    optimizer:\n      choice:\n"
        "        sgd: {momentum: {uniform: [0.8, 0.99]}}\n        adam: {}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load.load_sweep(str(path))
    assert str(raised.value).startswith(f"{path}:5: space.params.optimizer: a conditional choice needs searcher")


# --- Optuna's samplers ------------------------------------------------------------------------------
FLAT = {
    "lr": {"loguniform": [1.0e-4, 1.0e-2]},
    "dropout": {"uniform": [0.0, 0.5]},
    "conv1": {"randint": [8, 33]},
    "hidden": {"quniform": [64, 256, 32]},
}


@pytest.mark.parametrize("sampler", optuna_searcher.OPTUNA_SAMPLERS)
def test_every_optuna_sampler_suggests_inside_the_space_and_is_seeded(sampler):
    built = sweep(FLAT, {"name": "optuna", "sampler": sampler, "n_startup_trials": 2})
    inner = registry.build_searcher(built, 2).searcher
    assert (
        type(inner._ot_study.sampler)
        .__name__.lower()
        .startswith(
            {"tpe": "tpe", "cmaes": "cmaes", "gp": "gp", "qmc": "qmc", "nsga2": "nsgaii", "random": "random"}[sampler]
        )
    )
    proposed = suggest(built, 5)
    for config_ in proposed:
        assert 1.0e-4 <= config_["lr"] <= 1.0e-2 and 0.0 <= config_["dropout"] <= 0.5
        assert 8 <= config_["conv1"] <= 32 and isinstance(config_["conv1"], int)
        assert config_["hidden"] in (64, 96, 128, 160, 192, 224, 256)
    assert proposed == suggest(built, 5)
    assert len({c["lr"] for c in proposed}) >= 4  # a GP may ask for a bound twice


def test_an_unknown_sampler_is_refused_naming_the_choices():
    with pytest.raises(Exception, match=r"'tpe', 'cmaes', 'gp', 'qmc', 'nsga2' or 'random'"):
        sweep(FLAT, {"name": "optuna", "sampler": "smac"})


def test_a_choice_of_lists_goes_to_optuna_by_its_index():
    params = {"augment": {"choice": [[], ["random_crop"]]}, "optimizer": {"choice": ["adam", "sgd"]}}
    proposed = suggest(sweep(params, "optuna"), 8)
    assert {tuple(c["augment"]) for c in proposed} == {(), ("random_crop",)}
    assert {c["optimizer"] for c in proposed} == {"adam", "sgd"}


# --- warm start --------------------------------------------------------------------------------------
def test_a_warm_start_tells_optuna_the_trials_inside_its_space():
    built = sweep(CONDITIONAL, {"name": "optuna", "n_startup_trials": 0})
    search_alg = registry.build_searcher(built, 2)
    earlier = [
        base.Evaluated({"optimizer": "sgd", "momentum": 0.9, "lr": 0.05, "dropout": 0.1}, (0.5, 0.9)),
        base.Evaluated({"optimizer": "adam", "lr": 0.001, "dropout": 0.3}, (0.4, 0.6)),
        base.Evaluated({"optimizer": "adam", "lr": 0.5, "dropout": 0.3}, (0.7,)),  # lr outside adam's range
        base.Evaluated({"optimizer": "rmsprop", "lr": 0.001, "dropout": 0.3}, (0.7,)),  # no such branch
    ]
    assert optuna_searcher.warm_start(search_alg, earlier) == (2, 2)
    study = search_alg.searcher._ot_study
    told = study.get_trials()
    assert [t.value for t in told] == [0.9, 0.6]
    sgd = {"optimizer": "sgd", "optimizer.sgd.momentum": 0.9, "optimizer.sgd.lr": 0.05, "dropout": 0.1}
    assert told[0].params == sgd  # Optuna names a branch's parameters by their path
    assert told[0].intermediate_values == {1: 0.5, 2: 0.9}
    assert study.best_trial.params["optimizer"] == "sgd"
    # TPE takes over at once (n_startup_trials 0): its first proposal learns from the two told
    proposed = search_alg.suggest("t0")
    assert proposed["optimizer"] in ("sgd", "adam")
    assert len(study.get_trials()) == 3


def test_encode_goes_back_to_the_values_a_space_suggested():
    specs = schema.SweepConfig.model_validate(
        {"name": "x", "space": {"params": {**FLAT, "augment": {"choice": [[], ["random_crop"]]}}}}
    ).param_specs()
    space = OptunaSpace(specs)
    encoded = space.encode({"lr": 0.001, "dropout": 0.2, "conv1": 32, "hidden": 128.0, "augment": ["random_crop"]})
    assert encoded is not None
    params, distributions = encoded
    assert params == {"lr": 0.001, "dropout": 0.2, "conv1": 32, "hidden": 128.0, "augment": 1}
    outside = {"lr": 0.001, "dropout": 0.2, "conv1": 33, "hidden": 128.0, "augment": []}  # randint's high: excluded
    assert space.encode(outside) is None


def test_warm_start_is_refused_where_no_result_is_learned_from():
    with pytest.raises(Exception, match=r"searcher.warm_start: the qmc sampler draws a fixed sequence"):
        sweep(FLAT, {"name": "optuna", "sampler": "qmc", "warm_start": "runs/x"})
    with pytest.raises(Exception, match=r"searcher.warm_start: searcher 'random' cannot be told earlier results"):
        sweep(FLAT, {"name": "random", "warm_start": "runs/x"})


# --- auto ---------------------------------------------------------------------------------------------
ONLY_CHOICES = {name: {"choice": [16, 32, 64]} for name in ("conv1", "conv2", "hidden")} | {
    "optimizer": {"choice": ["adam", "sgd"]}
}


@pytest.mark.parametrize(
    ("params", "trials", "epochs", "scheduler", "searcher", "picked_scheduler"),
    [
        (FLAT, 20, 1, None, {"name": "optuna", "sampler": "gp"}, "fifo"),
        (FLAT, 200, 6, None, {"name": "optuna", "sampler": "gp"}, "fifo"),  # a GP, not ASHA: benchmarks/README.md
        (FLAT, 300, 1, None, {"name": "optuna", "sampler": "tpe"}, "fifo"),
        ({**FLAT, "optimizer": {"choice": ["adam", "sgd"]}}, 20, 6, None, {"name": "optuna", "sampler": "tpe"}, "asha"),
        (CONDITIONAL, 20, 1, None, {"name": "optuna", "sampler": "tpe"}, "fifo"),
        ({**FLAT, "optimizer": {"choice": ["adam", "sgd"]}}, 4, 2, None, {"name": "optuna", "sampler": "tpe"}, "fifo"),
        ({**FLAT, "batch_size": {"grid": [32, 64]}}, 4, 4, None, {"name": "random"}, "fifo"),
        (FLAT, 20, 6, {"name": "median"}, {"name": "optuna", "sampler": "tpe"}, "median"),
        (ONLY_CHOICES, 50, 1, None, {"name": "optuna", "sampler": "gp"}, "fifo"),  # pest control: README
        (ONLY_CHOICES, 50, 6, {"name": "asha"}, {"name": "optuna", "sampler": "tpe"}, "asha"),
    ],
    ids=[
        "few-numeric",
        "gp-not-asha",
        "many-trials",
        "choices-asha",
        "conditional",
        "choices",
        "grid",
        "file-scheduler",
        "only-choices",
        "only-choices-file-scheduler",
    ],
)
def test_auto_picks_from_the_space_budget_and_epochs(params, trials, epochs, scheduler, searcher, picked_scheduler):
    sections = {"trials": {"num_samples": trials}, "train": {"epochs": epochs}}
    if scheduler:
        sections["scheduler"] = scheduler
    built = schema.SweepConfig.model_validate(
        {"name": "auto_test", "searcher": {"name": "auto"}, "space": {"params": params}, **sections}
    )
    picked = {"name": built.searcher.name, "sampler": getattr(built.searcher, "sampler", None)}
    assert picked == {"sampler": None} | searcher
    assert built.scheduler.name == picked_scheduler
    assert built.picked.startswith("auto picked searcher " + searcher["name"])
    dumped = built.model_dump(mode="json", exclude_unset=True)
    assert dumped["searcher"]["name"] != "auto" and dumped["scheduler"]["name"] == picked_scheduler


def test_auto_says_why_and_keeps_a_warm_start():
    built = sweep(FLAT, {"name": "auto", "warm_start": "runs/earlier"}, trials={"num_samples": 30})
    assert built.searcher.name == "optuna" and built.searcher.warm_start == "runs/earlier"
    assert built.picked.startswith("auto picked searcher optuna (gp): 4 numeric parameters and 30 trials")
    assert built.scheduler.name == "fifo"
    choices = {**FLAT, "optimizer": {"choice": ["adam", "sgd"]}}
    choice = auto.pick(schema.SweepConfig.model_validate({"name": "x", "space": {"params": choices}}).param_specs(),
                       trials=30, epochs=4, scheduler_given=False)  # fmt: skip
    assert choice.scheduler == {"name": "asha", "grace_period": 1, "reduction_factor": 3}
    assert choice.reason.endswith("ASHA stops the worst trials early (30 trials of 4 epochs)")


def test_auto_reads_the_time_budget_for_what_it_gives_each_trial():
    """A GP's proposals pay where the budget gives each trial of the cap time (a long budget:
    the GP, and TPE past 256 trials), not where the trials take less than they do."""
    short = sweep(FLAT, "auto", trials={"num_samples": 480, "time_budget_s": 12})
    assert (short.searcher.sampler, short.searcher.tpe_after, short.scheduler.name) == ("tpe", None, "asha")
    assert "a time budget of 12 s for up to 480 trials (0.025 s a trial)" in short.picked
    few = sweep(FLAT, "auto", trials={"num_samples": 30, "time_budget_s": 12})
    assert few.searcher.sampler == "tpe"  # within the GP's trials, but 0.4 s a trial
    long = sweep(FLAT, "auto", trials={"num_samples": 480, "time_budget_s": 36000})
    assert (long.searcher.sampler, long.searcher.tpe_after, long.scheduler.name) == ("gp", 256, "fifo")
    assert "a time budget of 36000 s for up to 480 trials: a Gaussian process models the first 256" in long.picked
    assert long.searcher.described == "optuna (gp, tpe from trial 256)"
    untimed = sweep(FLAT, "auto", trials={"num_samples": 480})
    assert (untimed.searcher.sampler, untimed.searcher.tpe_after) == ("tpe", None)  # the trials rule alone
    timed_few = sweep(FLAT, "auto", trials={"num_samples": 30, "time_budget_s": 3600})
    assert (timed_few.searcher.sampler, timed_few.searcher.tpe_after) == ("gp", None)


def test_the_handover_sampler_proposes_as_the_gp_then_as_tpe_from_the_same_trials():
    import optuna

    from tuner.search.handover import GpThenTpe

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        return (trial.suggest_float("x", -2, 2) - 0.5) ** 2 + trial.suggest_float("y", 0, 1)

    def study(sampler: Any) -> Any:
        return optuna.create_study(sampler=sampler)

    handover = study(optuna_searcher.optuna_sampler("gp", 7, 2, tpe_after=6))
    assert isinstance(handover.sampler, GpThenTpe)
    handover.optimize(objective, n_trials=8)
    gp = study(optuna_searcher.optuna_sampler("gp", 7, 2))
    gp.optimize(objective, n_trials=6)
    assert [t.params for t in handover.trials[:6]] == [t.params for t in gp.trials]  # the GP's, as its own study
    tpe = study(optuna_searcher.optuna_sampler("tpe", 7, 2))
    for trial in handover.trials[:6]:
        tpe.add_trial(trial)
    tpe.optimize(objective, n_trials=2)  # TPE told the GP's six trials proposes the 7th and 8th alike
    assert [t.params for t in handover.trials[6:]] == [t.params for t in tpe.trials[6:]]


def test_the_gp_sampler_has_its_first_proposals_imports_made_on_a_thread_as_it_is_built():
    """Optuna's GP imports torch and SciPy at its first proposal (2.5 s here), in Tune's loop,
    which every trial waits for: a sweep that picks it has them imported while its first
    trials start. In a fresh process, which has imported none of them."""
    import subprocess
    import sys
    import textwrap

    probe = textwrap.dedent(
        """
        import sys, time
        from tuner.search import optuna_searcher
        assert "torch" not in sys.modules and "scipy.stats" not in sys.modules
        optuna_searcher.optuna_sampler("gp", 0, 4)
        deadline = time.monotonic() + 60
        while not {"torch", "scipy.stats.qmc", "optuna._gp.optim_mixed"} <= set(sys.modules):
            assert time.monotonic() < deadline, sorted(m for m in sys.modules if m.startswith(("torch", "scipy")))
            time.sleep(0.1)
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_handover_to_tpe_needs_the_gp():
    with pytest.raises(Exception, match=r"searcher.tpe_after: 50 hands a Gaussian process's search over to TPE; "
                       r"it needs sampler: gp, not tpe"):  # fmt: skip
        sweep(FLAT, {"name": "optuna", "sampler": "tpe", "tpe_after": 50})


# --- PB2 -----------------------------------------------------------------------------------------------
def test_pb2_explores_the_bounds_of_the_numeric_parameters():
    built = sweep({**FLAT, "optimizer": {"choice": ["adam", "sgd"]}}, scheduler={"name": "pb2"})
    assert built.scheduler.bounds(built) == {
        "lr": [1.0e-4, 1.0e-2],
        "dropout": [0.0, 0.5],
        "conv1": [8, 32],
        "hidden": [64, 256],
    }
    scheduler = built.scheduler.build(built)
    assert scheduler._hyperparam_bounds == built.scheduler.bounds(built)


def test_pb2_without_a_numeric_parameter_is_refused():
    with pytest.raises(Exception, match=r"space.params: pb2 explores within the bounds of numeric parameters"):
        sweep({"optimizer": {"choice": ["adam", "sgd"]}}, scheduler={"name": "pb2"})


def test_every_new_experiment_file_holds_the_feature_it_shows():
    """Each issue-26 experiment file loads and really uses its feature (tests/spec/test_experiments.py
    runs each one at smoke size)."""
    shows = {
        "mnist_conditional": lambda b: b.searcher.name == "optuna" and spaces.is_conditional(b.param_specs()),
        "mnist_model_choice": lambda b: b.searcher.name == "random" and sections.MODEL_CHOICE in b.param_specs(),
        "mnist_conditional_hyperopt": lambda b: (
            b.searcher.name == "hyperopt" and spaces.is_conditional(b.param_specs())
        ),
        "mnist_auto": lambda b: b.picked is not None and b.searcher.name != "auto",
        "mnist_optuna_gp": lambda b: b.searcher.sampler == "gp",
        "mnist_optuna_cmaes": lambda b: b.searcher.sampler == "cmaes",
        "mnist_optuna_qmc": lambda b: b.searcher.sampler == "qmc",
        "mnist_optuna_random": lambda b: b.searcher.sampler == "random",
        "mnist_nsga2": lambda b: b.searcher.sampler == "nsga2" and len(b.objectives) == 2,
        "mnist_pb2": lambda b: b.scheduler.name == "pb2",
        "mnist_multiobjective": lambda b: len(b.objectives) == 2 and isinstance(b.select, sections.SelectRule),
        "mnist_warm_start": lambda b: b.searcher.warm_start is not None,
    }
    for name, holds in shows.items():
        built = load.load_sweep(name)
        assert holds(built), f"experiments/{name}.yaml does not show its feature"


# --- several objectives ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    trial_id: str
    row: dict[str, float]


POINTS = [
    Point("a", {"acc": 0.90, "params": 1000}),
    Point("b", {"acc": 0.95, "params": 5000}),
    Point("c", {"acc": 0.97, "params": 50000}),
    Point("d", {"acc": 0.93, "params": 6000}),  # dominated by b
    Point("e", {"acc": 0.90, "params": 1000}),  # equal to a: neither dominates
]
TWO = [("acc", "max"), ("params", "min")]


def test_the_front_keeps_what_no_other_point_dominates():
    assert [p.trial_id for p in pareto.front(POINTS, TWO)] == ["a", "b", "c", "e"]
    assert pareto.dominates([0.95, 5000], [0.93, 6000], ["max", "min"])
    assert not pareto.dominates([0.90, 1000], [0.90, 1000], ["max", "min"])


def test_the_knee_is_nearest_the_ideal_point_over_the_scaled_front():
    chosen, said = pareto.choose(POINTS, TWO, pareto.Rule())
    assert chosen.trial_id == "b" and said.startswith("knee")


def test_a_where_rule_takes_the_best_meeting_it_else_the_knee_and_says_so():
    rule = pareto.Rule("acc", "max", pareto.parse_where("params < 10000 and acc >= 0.9"))
    chosen, said = pareto.choose(POINTS, TWO, rule)
    assert chosen.trial_id == "b" and said == "max acc where params < 10000 and acc >= 0.9"
    nobody = pareto.Rule("acc", "max", pareto.parse_where("params < 10"))
    chosen, said = pareto.choose(POINTS, TWO, nobody)
    assert chosen.trial_id == "b" and said == "knee, as no trial on the front meets max acc where params < 10"
    with pytest.raises(ValueError, match=r"cannot read condition 'params ~ 3'"):
        pareto.parse_where("params < 5 and params ~ 3")


def test_hypervolume_of_two_objectives():
    # minimise both, reference (4, 4): points (1, 3) and (3, 1) cover 3 + 3 - 1 = 5
    assert pareto.hypervolume([(1, 3), (3, 1)], (4, 4), ["min", "min"]) == pytest.approx(5.0)
    assert pareto.hypervolume([(1, 3), (3, 1), (3.5, 3.5)], (4, 4), ["min", "min"]) == pytest.approx(5.0)
    assert pareto.hypervolume([(2, 3)], (0, 4), ["max", "min"]) == pytest.approx(2.0)  # maximised: above 0
    assert pareto.hypervolume([(-1, 3)], (0, 4), ["max", "min"]) == 0.0  # worse than the reference


TWO_METRICS = {"metric": ["val_accuracy", "params"], "mode": ["max", "min"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scheduler": {"name": "asha"}}, r"scheduler.name: 'asha' compares trials by one metric, but the sweep "
         r"has 2 objectives \(val_accuracy, params\); use fifo"),
        ({"searcher": {"name": "hyperopt"}}, r"searcher.name: searcher 'hyperopt' optimises one metric"),
        ({"searcher": {"name": "optuna", "sampler": "cmaes"}}, r"searcher.name: optuna's cmaes sampler optimises"),
        ({"searcher": {"name": "optuna", "warm_start": "runs/x"}},
         r"searcher.warm_start: a warm start tells one metric's results; the sweep has 2 objectives"),
        ({"select": {"max": "val_accuracy", "min": "params"}}, r"select: give max: METRIC or min: METRIC \(one"),
        ({"select": {"max": "test_accuracy"}}, r"select: 'test_accuracy' is not an objective; choose from"),
        ({"select": {"max": "val_accuracy", "where": "params <<< 3"}}, r"select.where: cannot read condition"),
        ({"mode": ["max", "max"]}, r"mode: params is best at min, but got 'max'"),
        ({"metric": ["val_accuracy", "speed"]}, r"metric: tuner's loop reports .*, but got 'speed'"),
    ],
    ids=["asha", "hyperopt", "cmaes", "warm-start", "two-rules", "not-an-objective", "where", "mode", "unknown"],
)  # fmt: skip
def test_what_cannot_serve_several_objectives_is_refused_in_one_line(change, message):
    data = {"name": "two", "searcher": {"name": "optuna"}, **TWO_METRICS, **change}
    with pytest.raises(Exception, match=message):
        schema.SweepConfig.model_validate(data)


def test_a_single_metric_refuses_a_front_rule_and_a_size_metric_alone():
    with pytest.raises(Exception, match=r"select: picks one point of a Pareto front"):
        schema.SweepConfig.model_validate({"name": "one", "select": {"max": "val_accuracy"}})
    with pytest.raises(Exception, match=r"metric: 'params' alone would find the smallest model"):
        schema.SweepConfig.model_validate({"name": "one", "metric": "params"})


def test_auto_with_two_objectives_takes_grid_values_to_random_search():
    built = sweep({**FLAT, "batch_size": {"grid": [32, 64]}}, "auto", **TWO_METRICS)
    assert built.searcher.name == "random" and built.scheduler.name == "fifo"
    assert built.picked.startswith("auto picked searcher random: 2 objectives over a space with grid values")


@pytest.mark.parametrize(
    ("scheduler", "searcher"), [("bohb", "bohb"), ("pbt", "random"), ("pb2", "random")], ids=["bohb", "pbt", "pb2"]
)
def test_auto_gives_a_scheduler_that_needs_its_own_searcher_that_searcher(scheduler, searcher):
    params = {"lr": {"loguniform": [1.0e-4, 1.0e-2]}, "dropout": {"uniform": [0.0, 0.5]}}
    built = sweep(params, "auto", scheduler={"name": scheduler}, trials={"num_samples": 8})
    assert built.searcher.name == searcher and built.scheduler.name == scheduler
    assert built.picked.startswith(f"auto picked searcher {searcher}: scheduler {scheduler}")


def test_auto_refuses_a_warm_start_where_it_must_pick_a_searcher_that_cannot_take_one():
    with pytest.raises(Exception, match=r"searcher.warm_start: auto picked searcher random: the space has grid values"):
        sweep({**FLAT, "batch_size": {"grid": [32, 64]}}, {"name": "auto", "warm_start": "runs/x"})
    with pytest.raises(Exception, match=r"searcher.warm_start: auto picked searcher random: scheduler pbt"):
        sweep(FLAT, {"name": "auto", "warm_start": "runs/x"}, scheduler={"name": "pbt"})


# --- a choice of models ---------------------------------------------------------------------------------
MODELS = {"name": {"choice": {"cnn": {"conv2": {"choice": [16, 32]}, "hidden": 64}, "resnet18": {}}}}


def test_a_choice_of_models_becomes_a_conditional_choice_each_with_its_options():
    built = schema.SweepConfig.model_validate({"name": "m", "model": MODELS, "searcher": {"name": "optuna"}})
    assert built.model.name == "cnn"
    models = built.param_specs()["model"]
    assert models.kind == "branches" and set(models.branches) == {"cnn", "resnet18"}
    proposed = suggest(built, 10)
    assert {p["model"] for p in proposed} == {"cnn", "resnet18"}
    for trial in proposed:
        assert ("conv2" in trial) == (trial["model"] == "cnn")


def test_a_trial_builds_the_model_it_took_with_that_models_defaults():
    from tuner.trial.runner import TrialSetup, model_of, resolve_hyperparameters

    built = schema.SweepConfig.model_validate({"name": "m", "model": MODELS})
    setup = TrialSetup(
        model_name=built.model.name,
        model_defaults=built.model.model_dump(exclude={"name"}),
        train_defaults=built.train.model_dump(),
        workers=1,
        use_gpu=False,
        cpus_per_worker=1,
        gpus_per_worker=0,
        train_dir="",
        seed=0,
    )
    resnet = {"model": "resnet18", "lr": 0.002}
    assert model_of(setup, resnet) == "resnet18"
    train, options = resolve_hyperparameters(setup, resnet)
    assert train["lr"] == 0.002 and "conv2" not in options and "zero_init_residual" in options
    cnn = {"model": "cnn", "conv2": 32, "hidden": 64}
    assert model_of(setup, cnn) == "cnn"
    assert resolve_hyperparameters(setup, cnn)[1]["conv2"] == 32


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ({"name": {"choice": {"cnn": {"depth": 3}}}}, {}, r"model.name.choice.cnn.depth: not an option of model 'cnn'"),
        ({"name": {"choice": {"cnn": {"conv2": 0}}}}, {}, r"model.name.choice.cnn.conv2: value 0 is invalid"),
        ({"name": {"choice": {"cnn": {}}}, "hidden": 64}, {}, r"model.hidden: with a choice of models, give each"),
        ({"name": {"choice": [1, 2]}}, {}, r"model.name: a model's name, or a choice of models"),
        (MODELS, {"searcher": {"name": "bohb"}, "scheduler": {"name": "bohb"}}, r"model.name: a conditional choice"),
        (
            {"name": {"choice": {"cnn": {"hidden": 32}}}},
            {"space": {"params": {"hidden": 64}}},
            r"model.name.choice.cnn.hidden: 'hidden' is already a parameter outside this branch",
        ),
    ],
    ids=["unknown-option", "bad-value", "option-outside", "not-a-mapping", "bohb", "twice"],
)
def test_a_bad_choice_of_models_is_one_line(model, extra, message):
    with pytest.raises(Exception, match=message):
        schema.SweepConfig.model_validate({"name": "m", "model": model, **extra})
