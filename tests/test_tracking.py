"""After a real sweep: MLflow holds one parent and a nested run per trial, a registered
model that loads and predicts, and TensorBoard holds every trial's scalars and hparams."""

from __future__ import annotations

import glob
import os
import signal
import time

import numpy as np
import pytest
from integration_helpers import data_root, small_sweep

from tuner.config import SweepConfig
from tuner.store import trial_histories
from tuner.sweep import run_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def finished(local_ray, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("tracking")
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            space={"params": {"lr": {"grid": [3e-3, 2e-3, 1e-6]}, "dropout": {"uniform": [0.1, 0.4]}}},
            scheduler={"name": "asha", "grace_period": 1, "reduction_factor": 2},
            trials={"num_samples": 1},
            tracking={"mlflow": {"registered_model": "it_cnn"}},
        )
    )
    return sweep, run_sweep(sweep)


@pytest.fixture(scope="module")
def client(finished):
    from mlflow.tracking import MlflowClient

    from tuner.tracking import tracking_uri

    return MlflowClient(tracking_uri(finished[0]))


def test_one_parent_run_and_one_nested_run_per_trial(finished, client):
    sweep, outcome = finished
    experiment = client.get_experiment_by_name(sweep.name)
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1
    (parent,) = parents
    trial_ids = {result.metrics["trial_id"] for result in outcome.results}
    assert {r.data.tags["tuner.trial_id"] for r in children} == trial_ids
    assert len(children) == len(trial_ids) == 3
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in children)

    assert parent.data.params["scheduler"] == "asha" and parent.data.params["searcher"] == "random"
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(outcome.best["val_accuracy"])
    assert parent.data.metrics["best_test_accuracy"] == pytest.approx(outcome.best["test_accuracy"])
    assert parent.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "sweep.yaml" in artifacts and "best" in artifacts


def test_trial_runs_hold_params_per_epoch_metrics_and_status(finished, client):
    sweep, outcome = finished
    results = {result.metrics["trial_id"]: result for result in outcome.results}
    experiment = client.get_experiment_by_name(sweep.name)
    children = client.search_runs([experiment.experiment_id], "tags.tuner.kind = 'trial'")
    statuses = set()
    for run in children:
        result = results[run.data.tags["tuner.trial_id"]]
        assert float(run.data.params["lr"]) == pytest.approx(result.config["lr"])
        assert float(run.data.params["dropout"]) == pytest.approx(result.config["dropout"])
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        epochs = [row["val_accuracy"] for row in trial_histories(outcome.paths)[result.metrics["trial_id"]]]
        assert [m.step for m in history] == list(range(1, len(epochs) + 1))
        assert [m.value for m in history] == pytest.approx(epochs)
        for name in ("train_loss", "val_loss"):
            assert len(client.get_metric_history(run.info.run_id, name)) == len(epochs)
        statuses.add(run.data.tags["tuner.status"])
        assert run.info.status == "FINISHED"
    # lr=1e-6 cannot learn: the two good trials run first, so when it reports epoch 1 the
    # median cut is between them and ASHA stops it; its run says so.
    assert statuses == {"finished", "stopped_early"}


def test_the_best_model_is_registered_and_loads_with_mlflow(finished, client):
    import mlflow.pytorch
    import torch

    from tuner.data import load_test_split, normalise

    sweep, outcome = finished
    versions = client.search_model_versions("name='it_cnn'")
    assert len(versions) == 1
    version = versions[0]
    assert version.tags["trial_id"] == outcome.best["trial_id"]
    assert version.tags["sweep"] == sweep.name
    assert str(outcome.best["model_version"]) == str(version.version)

    from tuner.tracking import _fluent_uri, tracking_uri

    # As a user would point MLflow at the store; restored after (it leaks into the
    # environment, and so into later tests' subprocesses, otherwise).
    with _fluent_uri(tracking_uri(sweep)):
        model = mlflow.pytorch.load_model(f"models:/it_cnn/{version.version}", map_location="cpu")
    test = load_test_split("mnist", str(data_root()), download=False)
    x = normalise(torch.from_numpy(np.array(test.images[:1000])), (0.1307,), (0.3081,))
    with torch.no_grad():
        predicted = model(x).argmax(1).numpy()
    assert (predicted == test.labels[:1000]).mean() > 0.5


def test_tensorboard_has_every_trials_scalars_and_hparams(finished):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    sweep, outcome = finished
    folders = sorted(glob.glob(str(outcome.paths.tune / "trial_driver_*")))
    assert len(folders) == 3
    for folder in folders:
        events = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        scalars = events.Tags()["scalars"]
        for metric in ("val_accuracy", "val_loss", "train_loss"):
            assert f"ray/tune/{metric}" in scalars
        steps = [e.step for e in events.Scalars("ray/tune/val_accuracy")]
        assert steps == list(range(1, len(steps) + 1))
        hparams = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_start_info"])
        assert {"lr", "dropout"} <= set(start.session_start_info.hparams)
        experiment = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/experiment"])
        assert "ray/tune/val_accuracy" in {m.name.tag for m in experiment.experiment.metric_infos}


def test_a_sweep_records_to_a_tracking_server_by_configuration(local_ray, tmp_path):
    """tracking.mlflow.tracking_uri pointing at an MLflow server (started as `tuner ui` does)."""
    import subprocess
    import sys

    from integration_helpers import free_port
    from mlflow.tracking import MlflowClient

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(url)
        sweep = SweepConfig.model_validate(
            small_sweep(
                tmp_path,
                train={"epochs": 1},
                trials={"num_samples": 1},
                tracking={"mlflow": {"tracking_uri": url, "experiment": "remote_it", "registered_model": "remote_cnn"}},
            )
        )
        outcome = run_sweep(sweep)
        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("remote_it")
        runs = client.search_runs([experiment.experiment_id])
        assert sorted(r.data.tags["tuner.kind"] for r in runs) == ["sweep", "trial"]
        (version,) = client.search_model_versions("name='remote_cnn'")
        assert version.tags["trial_id"] == outcome.best["trial_id"]
        assert not (tmp_path / "runs" / "mlflow.db").exists()  # nothing went to the local default
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def _wait_for(url: str, timeout_s: float = 120) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_run_created_just_before_a_crash_is_adopted_not_made_twice(tmp_path):
    """SIGKILL between MLflow's create_run and mlflow.json's save: the restarted driver
    finds the trial's run by its tags and keeps logging into it."""
    from mlflow.tracking import MlflowClient

    from tuner.store import SweepPaths
    from tuner.tracking import SweepRecord

    sweep = SweepConfig.model_validate({"name": "crash", "output_dir": str(tmp_path / "runs")})
    paths = SweepPaths(tmp_path / "runs" / "crash")
    (paths.root / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, paths)
    before = (paths.root / "mlflow.json").read_text()
    record.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 1, "val_accuracy": 0.5})
    (paths.root / "mlflow.json").write_text(before)  # what the killed driver had saved

    again = SweepRecord(sweep, paths)
    again.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 1, "val_accuracy": 0.5})  # re-run epoch
    again.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 2, "val_accuracy": 0.6})
    client = MlflowClient(again.uri)
    runs = client.search_runs([again.experiment_id], "tags.tuner.trial_id = 't_00000'")
    assert len(runs) == 1
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "val_accuracy")]
    assert sorted(steps) == [1, 2]
