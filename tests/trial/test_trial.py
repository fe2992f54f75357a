"""What the README promises of a trial, on a real local Ray and real MNIST images: the LR
schedules and optimisers as documented, trials.max_concurrent, and trials.time_budget_s."""

from __future__ import annotations

import time

import pytest
from integration_helpers import assert_no_leaks, data_root, small_sweep

from tuner.driver.sweep import run_sweep
from tuner.folder.records import read_timeline, trial_histories
from tuner.sweepfile.schema import SweepConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
LR = 2e-3


def test_lr_schedules_as_documented_with_one_trial_at_a_time(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 1000},
            train={"epochs": 2, "lr": LR},
            space={"params": {"lr_schedule": {"grid": ["constant", "cosine", "step"]}}},
            trials={"num_samples": 1, "max_concurrent": 1},
            tracking={"mlflow": {"enabled": False}},
        )
    )
    outcome = run_sweep(sweep)
    by_schedule = {}
    for result in outcome.results:
        rows = trial_histories(outcome.folder)[result.metrics["trial_id"]]
        by_schedule[result.config["lr_schedule"]] = [row["lr"] for row in rows]
    # the lr recorded is the last step's of each epoch (15 steps an epoch, 30 in all)
    assert by_schedule["constant"] == [LR, LR]
    first, last = by_schedule["cosine"]
    assert 0.45 * LR < first < 0.65 * LR and last < 0.01 * LR  # cosine: half-way, then ~0
    assert by_schedule["step"] == pytest.approx([LR, LR / 100])  # /10 at 50% and at 75%

    # max_concurrent=1 on 2 CPUs: no two trials ever ran at once
    running, most = 0, 0
    for event in sorted(read_timeline(outcome.folder), key=lambda e: e["time"]):
        running += {"start": 1, "end": -1, "error": -1}.get(event["event"], 0)
        most = max(most, running)
    assert most == 1, read_timeline(outcome.folder)
    assert_no_leaks()


def test_the_time_budget_stops_running_trials_and_the_best_is_exported(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 1000},
            train={"epochs": 300},  # ~2 min a trial: far over the budget
            # 30 s: under CI's load a trial process's start alone has taken 20 s
            trials={"num_samples": 4, "time_budget_s": 30},
            tracking={"mlflow": {"enabled": False}},
        )
    )
    started = time.monotonic()
    outcome = run_sweep(sweep)
    histories = trial_histories(outcome.folder)
    epochs = [len(rows) for rows in histories.values()]
    assert histories and max(epochs) < 300, f"no running trial was stopped by the budget: {epochs}"
    assert sum(epochs) < 4 * 300
    assert (outcome.folder.best / "model.pt").is_file() and outcome.best["test_accuracy"] > 0.2
    assert time.monotonic() - started < 120
    assert_no_leaks()


def _train(local_ray, **train) -> tuple[list[dict], dict]:
    """One real trial loop in this process (no Tune): its reports and last checkpoint."""
    import torch

    from tuner.data.datasets import load_training_data
    from tuner.trial.loop import run_training
    from tuner.trial.runner import TrialSetup, resolve_hyperparameters
    from tuner.trial.session import LoopSettings, Session, load_state

    class Collect(Session):
        rank, world, device = 0, 1, torch.device("cpu")

        def __init__(self):
            self.reports, self.state = [], None

        def resume_state(self):
            return None

        def prepare_model(self, model):
            return model

        def report(self, metrics, checkpoint_dir):
            self.reports.append(metrics)
            self.state = load_state(checkpoint_dir)

    data = load_training_data("mnist", str(data_root()), val_fraction=0.1, train_subset=1000, seed=0)
    setup = TrialSetup("cnn", {"conv1": 8, "conv2": 16, "hidden": 32}, {"epochs": 1, "lr": LR}, 1, False, 1, 0, "", 0)
    train_config, model_options = resolve_hyperparameters(setup, train)
    loop = LoopSettings(
        train=train_config,
        model_name="cnn",
        model_options=model_options,
        data_ref=local_ray.put(data),
        threads=1,
        seed=7,
        trial_id="t",
        entered_at=time.time(),
    )
    session = Collect()
    run_training(loop, session)
    return session.reports, session.state


def test_the_optimisers_are_the_documented_ones(local_ray):
    lrs = {"adam": LR, "adamw": LR, "sgd": 0.02}
    results = {name: _train(local_ray, optimizer=name, lr=lr, weight_decay=0.01) for name, lr in lrs.items()}
    groups = {name: state["optimizer"]["param_groups"][0] for name, (_, state) in results.items()}
    states = {name: next(iter(state["optimizer"]["state"].values())) for name, (_, state) in results.items()}
    assert groups["sgd"]["nesterov"] and groups["sgd"]["momentum"] == 0.9 and "momentum_buffer" in states["sgd"]
    assert "exp_avg" in states["adam"] and not groups["adam"]["decoupled_weight_decay"]
    assert "exp_avg" in states["adamw"] and groups["adamw"]["decoupled_weight_decay"]
    assert all(group["weight_decay"] == 0.01 for group in groups.values())
    losses = {name: reports[-1]["train_loss"] for name, (reports, _) in results.items()}
    assert len(set(losses.values())) == 3, losses  # each optimiser trained a different model
    accuracy = {name: reports[-1]["val_accuracy"] for name, (reports, _) in results.items()}
    assert accuracy["adam"] > 0.2 and accuracy["adamw"] > 0.2, accuracy  # 15 steps: SGD is still near chance
    assert all(0 < loss < 3 for loss in losses.values()), losses


def test_a_trial_process_fetches_the_sweeps_trial_values_once_and_every_trial_gets_them(local_ray):
    """tune.with_parameters fetches its values at every trial's start (5 ms with reused trial
    processes); tuner's fetches them once per trial process. Four trials in one actor, as Tune
    reuses one: each gets the values; the object store is asked once for each."""
    import ray

    from tuner.trial.runner import with_kept_parameters

    def trainable(config, setup=None, data=None):
        return config["i"], setup, data

    trial = with_kept_parameters(trainable, setup={"seed": 7}, data=[ray.put(b"images")])
    assert trial.__name__ == "trainable"

    @ray.remote(num_cpus=0)
    class TrialProcess:
        def run(self, i):
            from tuner.trial import runner

            gets, plain = [0], ray.get

            def counted(ref, *args, **kwargs):
                gets[0] += 1
                return plain(ref, *args, **kwargs)

            ray.get = counted
            try:
                index, setup, data = trial({"i": i})
            finally:
                ray.get = plain
            return index, setup, plain(data[0]), gets[0], len(runner._KEPT)

    process = TrialProcess.remote()
    runs = [ray.get(process.run.remote(i)) for i in range(4)]
    ray.kill(process)
    assert [r[:3] for r in runs] == [(i, {"seed": 7}, b"images") for i in range(4)]
    assert [r[3] for r in runs] == [2, 0, 0, 0]  # setup and data, fetched by the first trial only
    assert {r[4] for r in runs} == {2}
