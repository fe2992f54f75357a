"""Issue 26's search features run as users run them, on one real local Ray: a conditional
space recorded as the branch each trial took (history, MLflow, TensorBoard HParams, status,
best), ``searcher: auto`` saying what it picked, a warm start told to Optuna, ``tuner extend``
twice on the same folder, several objectives with a Pareto front and a stated rule, PB2.

tuner's synthetic trial (a known curve, no training) keeps each sweep to seconds; the
two-objective sweep runs a user's training function from a folder tuner never saw.
"""

from __future__ import annotations

import json
import pickle
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from integration_helpers import mlflow_children, small_sweep, tuner_cli

from tuner.driver.extend import extend_sweep
from tuner.driver.sweep import run_sweep
from tuner.errors import ConfigError, TunerError
from tuner.folder import records
from tuner.sweepfile.schema import SweepConfig

pytestmark = pytest.mark.integration

CONDITIONAL = {
    "optimizer": {
        "choice": {
            "sgd": {"momentum": {"uniform": [0.8, 0.99]}, "lr": {"loguniform": [1.0e-3, 1.0e-1]}},
            "adam": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}},
        }
    }
}


def synthetic(tmp_path: Path, **sections) -> dict:
    sweep = small_sweep(
        tmp_path,
        model={"name": "synthetic", "epoch_s": 0},
        train={"epochs": 2},
        tracking={"mlflow": {"registry": False}},
        **sections,
    )
    sweep["data"]["train_subset"] = 1000
    del sweep["model"]["conv1"], sweep["model"]["conv2"], sweep["model"]["hidden"]
    sweep["train"] = {"epochs": 2}
    return sweep


def branch_ok(config: dict) -> bool:
    """Only the branch taken: sgd with its momentum and lr, or adam with its lr."""
    if config["optimizer"] == "sgd":
        return {"momentum", "lr"} <= set(config) and 1e-3 <= config["lr"] <= 1e-1
    return config["optimizer"] == "adam" and "momentum" not in config and 1e-4 <= config["lr"] <= 1e-2


@pytest.fixture(scope="module")
def conditional(local_ray, tmp_path_factory):
    """A conditional sweep through Optuna, finished: its folder."""
    tmp_path = tmp_path_factory.mktemp("conditional")
    sweep = SweepConfig.model_validate(
        synthetic(
            tmp_path,
            name="cond",
            space={"params": CONDITIONAL},
            searcher={"name": "optuna", "n_startup_trials": 2},
            trials={"num_samples": 6},
        )
    )
    return run_sweep(sweep).folder


def test_a_conditional_space_reaches_every_record_as_the_branch_taken(conditional):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    trial_configs = {}
    for path in sorted(conditional.tune.glob("trial_driver_*/params.json")):
        config = json.loads(path.read_text())
        trial_configs[path.parent.name] = config
        assert branch_ok(config), config
    assert len(trial_configs) == 6
    assert {c["optimizer"] for c in trial_configs.values()} == {"sgd", "adam"}

    state = json.loads((conditional.root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], "tags.tuner.kind = 'trial'")
    assert len(runs) == 6
    for run in runs:
        params = {
            k: float(v) if k != "optimizer" else v
            for k, v in run.data.params.items()
            if k in ("optimizer", "lr", "momentum")
        }
        assert branch_ok(params), run.data.params

    for folder in conditional.tune.glob("trial_driver_*"):
        events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
        events.Reload()
        content = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        hparams = set(start.session_start_info.hparams)
        assert "optimizer" in hparams and ("momentum" in hparams) == ("optimizer=sgd" in folder.name)

    status = tuner_cli("status", str(conditional.root))
    assert status.returncode == 0, status.stderr
    rows = [line for line in status.stdout.splitlines() if "optimizer=" in line]
    assert len(rows) == 6 and all(("momentum=" in row) == ("optimizer=sgd" in row) for row in rows)
    best = tuner_cli("best", str(conditional.root))
    assert best.returncode == 0 and "  optimizer: " in best.stdout

    # the report: a branch's parameter sits at "-" in the trials of the other branch, and
    # importance is computed over every trial (the choice standing for its branches)
    from tuner.results import report_data, report_plots

    read = report_data.read(conditional.root)
    assert {"optimizer", "lr", "momentum"} <= set(read.searched)
    momentum = [t.config.get("momentum") for t in read.trials]
    positions, ticks = report_plots._axis_position(read.searched["momentum"], momentum)
    assert (0.0, "-") in ticks
    assert [p == 0.0 for p in positions] == [t.config["optimizer"] != "sgd" for t in read.trials]
    found = report_data.importance(read)
    assert found.trials == 6 and "momentum" not in found.values, found


def test_a_warm_start_tells_optuna_the_earlier_trials_and_a_bad_one_writes_nothing(conditional, tmp_path, capsys):
    sweep = SweepConfig.model_validate(
        synthetic(
            tmp_path,
            name="warm",
            space={"params": CONDITIONAL},
            searcher={"name": "optuna", "n_startup_trials": 0, "warm_start": str(conditional.root)},
            trials={"num_samples": 2},
        )
    )
    outcome = run_sweep(sweep)
    said = capsys.readouterr().out
    assert f"warm start: 6 trial(s) of {conditional.root} told to the searcher" in said
    assert len(records.trial_histories(outcome.folder)) == 2

    for where, message in [
        (tmp_path / "nowhere", r"searcher.warm_start: .*nowhere is not a sweep folder"),
        (conditional.root, r"searcher.warm_start: .* maximised val_accuracy, but this sweep minimises val_loss"),
    ]:
        data = synthetic(
            tmp_path / "bad",
            name="bad",
            metric="val_loss",
            space={"params": CONDITIONAL},
            searcher={"name": "optuna", "warm_start": str(where)},
        )
        if where == tmp_path / "nowhere":
            data.pop("metric")
        with pytest.raises(ConfigError, match=message):
            run_sweep(SweepConfig.model_validate(data))
        assert not (tmp_path / "bad" / "runs" / "bad").exists(), "a refused warm start claimed a folder"


def test_extend_runs_more_trials_in_the_same_folder_twice_and_best_is_over_all(conditional):
    before = records.trial_histories(conditional)
    parent_runs = mlflow_children(conditional.root)
    assert len(before) == 6 and len(parent_runs) == 6

    for round_, total in ((2, 8), (3, 10)):
        done = tuner_cli("extend", str(conditional.root), "--trials", "2")
        assert done.returncode == 0, done.stderr[-2000:]
        assert (conditional.root / f"tune-{round_}").is_dir()
        previous = "tune" if round_ == 2 else f"tune-{round_ - 1}"
        assert f"  extend: 2 more trial(s) in tune-{round_}/, the searcher going on from {previous}/" in done.stdout
        histories = records.trial_histories(conditional)
        assert len(histories) == total
        saved = yaml.safe_load((conditional.root / "sweep.yaml").read_text())
        assert saved["trials"]["num_samples"] == total
        assert len(mlflow_children(conditional.root)) == total  # under the same parent run
        status = tuner_cli("status", str(conditional.root))
        assert f"{total} of {total} trial(s) started" in status.stdout and f"{total} finished" in status.stdout
        # the searcher went on from what it had learned: one Optuna study holds every part's trials
        saved_state = next((conditional.root / f"tune-{round_}").glob("searcher-state-*.pkl"))
        state = pickle.loads(saved_state.read_bytes())
        inner = state["searcher"].__dict__ if "searcher" in state else state  # a ConcurrencyLimiter's searcher
        assert len(inner["_ot_study"].trials) == total

    sweep = SweepConfig.model_validate(yaml.safe_load((conditional.root / "sweep.yaml").read_text()))
    best = sweep.best_epoch(records.trial_histories(conditional))
    exported = json.loads((conditional.root / "best" / "metrics.json").read_text())
    assert exported["trial_id"] == best.trial_id  # over all 10 trials, whichever part ran it
    new_ids = set(records.trial_histories(conditional)) - set(before)
    configs = [
        json.loads(p.read_text())
        for part in ("tune-2", "tune-3")
        for p in (conditional.root / part).glob("*/params.json")
    ]
    assert len(new_ids) == 4 and len(configs) == 4 and all(branch_ok(c) for c in configs)


def test_extend_refuses_a_sweep_that_has_not_ended_and_writes_nothing(conditional, tmp_path):
    root = tmp_path / "runs" / "unexported"
    shutil.copytree(conditional.root, root)
    (root / "best" / "metrics.json").unlink()  # as a sweep cut short before its export leaves it
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*") if p.name != "lock")
    with pytest.raises(TunerError, match=r"unexported: the sweep has not exported its best model yet; resume it"):
        extend_sweep(str(root), 2)
    with pytest.raises(TunerError, match="--trials: at least 1 more trial"):
        extend_sweep(str(root), 0)
    after = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*") if p.name != "lock")
    assert after == before, "a refused extend wrote into the folder"


def test_a_choice_of_models_trains_the_model_each_trial_took_and_exports_the_best_ones(local_ray, tmp_path):
    data = synthetic(
        tmp_path,
        name="models",
        searcher={"name": "random"},
        trials={"num_samples": 4},
    )
    data["model"] = {
        "name": {
            "choice": {"cnn": {"conv1": 4, "conv2": {"choice": [8, 16]}, "hidden": 16}, "synthetic": {"epoch_s": 0}}
        }
    }
    outcome = run_sweep(SweepConfig.model_validate(data))
    configs = [json.loads(p.read_text()) for p in outcome.folder.tune.glob("*/params.json")]
    assert {c["model"] for c in configs} == {"cnn", "synthetic"}
    assert all(("conv2" in c) == (c["model"] == "cnn") for c in configs)
    exported = yaml.safe_load((outcome.folder.best / "config.yaml").read_text())
    assert exported["model"]["name"] == exported["hyperparameters"]["model"]
    expected = {"conv1": 4, "conv2": exported["hyperparameters"].get("conv2"), "hidden": 16}
    wanted = expected if exported["model"]["name"] == "cnn" else {"epoch_s": 0}
    assert {k: exported["model"]["options"].get(k) for k in wanted} == wanted  # the best trial's model's options


def test_auto_says_what_it_picked_first(local_ray, tmp_path, capsys):
    sweep = SweepConfig.model_validate(
        synthetic(
            tmp_path,
            name="auto",
            space={"params": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}, "weight_decay": {"uniform": [0.0, 1.0e-3]}}},
            searcher={"name": "auto"},
            trials={"num_samples": 3},
        )
    )
    run_sweep(sweep)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  auto picked searcher optuna (gp): 2 numeric parameters and 3 trials, which a")
    saved = yaml.safe_load((tmp_path / "runs" / "auto" / "sweep.yaml").read_text())
    assert saved["searcher"]["name"] == "optuna" and saved["searcher"]["sampler"] == "gp"


TWO_OBJECTIVES = """
def train(params, context):
    width = params["width"]
    for epoch in range(context.start_epoch, context.max_epochs):
        score = 1.0 - 1.0 / (1.0 + width * (epoch + 1))
        context.report({"score": score, "cost": float(width)})
"""


def test_several_objectives_give_a_front_and_the_rule_picks_the_export(local_ray, tmp_path):
    code = tmp_path / "elsewhere"
    code.mkdir()
    (code / "two.py").write_text(textwrap.dedent(TWO_OBJECTIVES))
    sweep_file = code / "two.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "two",
                "output_dir": str(tmp_path / "runs"),
                "trainable": "two:train",
                "metric": ["score", "cost"],
                "mode": ["max", "min"],
                "select": {"max": "score", "where": "cost <= 5"},
                "train": {"epochs": 2},
                "space": {"params": {"width": {"choice": [1, 2, 4, 8, 16]}}},
                "searcher": {"name": "optuna", "sampler": "nsga2"},
                "trials": {"num_samples": 5},
                "tracking": {"mlflow": {"registry": False}},
            }
        )
    )
    done = tuner_cli("sweep", str(sweep_file))
    assert done.returncode == 0, done.stderr[-2000:]
    root = tmp_path / "runs" / "two"
    exported = yaml.safe_load((root / "best" / "config.yaml").read_text())
    assert exported["metric"]["selected_by"] == "max score where cost <= 5"
    assert exported["hyperparameters"]["width"] == max(
        w for w in (json.loads(p.read_text())["width"] for p in (root / "tune").glob("*/params.json")) if w <= 5
    )
    assert "Pareto front of" in done.stdout and "<- exported" in done.stdout
    status = tuner_cli("status", str(root))
    assert "chosen by select: max score where cost <= 5" in status.stdout
    best = tuner_cli("best", str(root))
    assert best.returncode == 0 and "Pareto front of" in best.stdout and "<- exported" in best.stdout
    # a wider net scores more and costs more: no trial dominates another, all 5 are on the front
    assert "Pareto front of 5 trial(s) over score, cost:" in best.stdout, best.stdout
    from mlflow.tracking import MlflowClient

    state = json.loads((root / "mlflow.json").read_text())
    logged = MlflowClient(state["tracking_uri"]).get_run(state["parent_run_id"]).data.metrics
    assert logged["best_score"] == pytest.approx(json.loads((root / "best" / "metrics.json").read_text())["score"])
    assert logged["best_cost"] == exported["hyperparameters"]["width"]
    report = tuner_cli("report", str(root))
    assert report.returncode == 0 and (root / "report" / "pareto.png").stat().st_size > 10_000


def test_pb2_explores_within_the_bounds_of_the_space(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        synthetic(
            tmp_path,
            name="pb2",
            space={"params": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}}},
            scheduler={"name": "pb2", "perturbation_interval": 1},
            trials={"num_samples": 4},
        )
        | {"train": {"epochs": 4}}
    )
    outcome = run_sweep(sweep)
    histories = records.trial_histories(outcome.folder)
    assert len(histories) == 4 and all(len(rows) == 4 for rows in histories.values())
    exploited = [row for rows in histories.values() for row in rows if row.get("resumed_from") not in ("", None)]
    assert exploited, "PB2 never continued a trial from a better one's checkpoint"
    for path in outcome.folder.tune.glob("*/params.json"):  # PB2's GP works in float32: a bound to ~1e-7
        assert 1.0e-4 * (1 - 1e-6) <= json.loads(path.read_text())["lr"] <= 1.0e-1 * (1 + 1e-6)
