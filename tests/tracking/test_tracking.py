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

from tuner.data.datasets import load_test_split
from tuner.driver.sweep import run_sweep
from tuner.folder.records import NOT_METRICS, TRIAL_METRICS, trial_histories
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import writer

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
    with pytest.MonkeyPatch.context() as patch:  # MLflow's writes from a process, as a sweep of 100+ trials has them
        patch.setattr(writer, "PROCESS_FROM", 1)
        return sweep, run_sweep(sweep)


@pytest.fixture(scope="module")
def client(finished):
    from mlflow.tracking import MlflowClient

    from tuner.tracking.mlflow_runs import tracking_uri

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
        epochs = [row["val_accuracy"] for row in trial_histories(outcome.folder)[result.metrics["trial_id"]]]
        assert [m.step for m in history] == list(range(1, len(epochs) + 1))
        assert [m.value for m in history] == pytest.approx(epochs)
        for name in ("train_loss", "val_loss"):
            assert len(client.get_metric_history(run.info.run_id, name)) == len(epochs)
        statuses.add(run.data.tags["tuner.status"])
        assert run.info.status == "FINISHED"
    # lr=1e-6 cannot learn: the two good trials run first, so when it reports epoch 1 the
    # median cut is between them and ASHA stops it; its run says so.
    assert statuses == {"finished", "stopped_early"}


def _served(sweep, client):
    """The registered model as anyone loads it: ``models:/it_cnn/<version>`` with pyfunc."""
    import mlflow.pyfunc

    from tuner.tracking.mlflow_model import fluent_uri
    from tuner.tracking.mlflow_runs import tracking_uri

    [version] = client.search_model_versions("name='it_cnn'")
    # As a user would point MLflow at the store; restored after (it leaks into the
    # environment, and so into later tests' subprocesses, otherwise).
    with fluent_uri(tracking_uri(sweep)):
        return version, mlflow.pyfunc.load_model(f"models:/it_cnn/{version.version}")


def test_the_registered_model_takes_uint8_images_and_reproduces_the_exports_test_accuracy(finished, client):
    sweep, outcome = finished
    version, model = _served(sweep, client)
    assert version.tags["trial_id"] == outcome.best["trial_id"]
    assert version.tags["sweep"] == sweep.name
    assert str(outcome.best["model_version"]) == str(version.version)

    # The signature says what it takes and gives: raw uint8 pixels, classes and probabilities.
    inputs = model.metadata.get_input_schema().inputs
    assert [(str(t.type), t.shape) for t in inputs] == [("uint8", (-1, 1, 28, 28))]
    outputs = model.metadata.get_output_schema().input_names()
    assert outputs[:3] == ["class", "label", "probability"] and len(outputs) == 3 + 10

    test = load_test_split("mnist", str(data_root()), download=False)
    images = np.asarray(test.images)  # uint8 [N, 1, 28, 28], 0-255, as they come
    assert images.dtype == np.uint8 and images.ndim == 4
    predicted = model.predict(images)
    accuracy = float((predicted["class"].to_numpy() == test.labels).mean())
    assert accuracy == pytest.approx(outcome.best["test_accuracy"], abs=1e-4)
    assert (predicted["label"] == predicted["class"].astype(str)).all()  # MNIST's class names
    probabilities = predicted[[f"p_{k}" for k in range(10)]].to_numpy()
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert np.allclose(probabilities.max(axis=1), predicted["probability"].to_numpy())

    # [N, H, W] works when called directly; anything but uint8 is refused, never misread.
    direct = model.unwrap_python_model().predict(None, images[:100, 0])
    assert (direct["class"].to_numpy() == predicted["class"].to_numpy()[:100]).all()
    with pytest.raises(Exception, match="uint8"):
        model.predict(images[:10].astype(np.float32) / 255.0)


def test_mlflow_models_serve_and_tuner_predict_agree_with_the_registered_model(finished, client, tmp_path):
    import csv
    import json
    import subprocess
    import sys
    import urllib.request

    from integration_helpers import free_port, tuner_cli

    from tuner.tracking.mlflow_runs import tracking_uri

    sweep, outcome = finished
    version, model = _served(sweep, client)
    test = load_test_split("mnist", str(data_root()), download=False)
    images = np.asarray(test.images[:200])
    expected = model.predict(images)["class"].to_numpy()

    # MLflow's scoring server, started the way its docs say, on 127.0.0.1.
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/it_cnn/{version.version}"]
        + ["--env-manager", "local", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        # As in an activated venv: MLflow starts the server as `uvicorn` from PATH.
        env={
            **os.environ,
            "MLFLOW_TRACKING_URI": tracking_uri(sweep),
            "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                assert server.poll() is None, server.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the scoring server did not answer"
                time.sleep(1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=json.dumps({"inputs": images.tolist()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            served = json.loads(response.read())["predictions"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert [row["class"] for row in served] == expected.tolist()
    assert served[0]["label"] == str(expected[0]) and 0.0 <= served[0]["probability"] <= 1.0

    # tuner predict, on the exported best/ (no MLflow), names the same classes.
    np.save(tmp_path / "images.npy", images)
    out = tmp_path / "predicted.csv"
    done = tuner_cli("predict", str(outcome.folder.best), "--data", str(tmp_path / "images.npy"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(row["predicted"]) for row in rows] == expected.tolist()


def test_tensorboard_has_every_trials_scalars_and_hparams(finished):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    sweep, outcome = finished
    folders = sorted(glob.glob(str(outcome.folder.tune / "trial_driver_*")))
    assert len(folders) == 3
    for folder in folders:
        events = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        scalars = events.Tags()["scalars"]
        for metric in ("val_accuracy", "val_loss", "train_loss"):
            assert f"ray/tune/{metric}" in scalars
        # the trial's metrics, as MLflow has them, and no bookkeeping (a clock, done, ...)
        assert {f"ray/tune/{metric}" for metric in TRIAL_METRICS} <= set(scalars), scalars
        assert not {f"ray/tune/{key}" for key in NOT_METRICS} & set(scalars), scalars
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

    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "crash", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "crash")
    (folder.root / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, folder)
    before = (folder.root / "mlflow.json").read_text()
    record.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 1, "val_accuracy": 0.5})
    record.flush()
    (folder.root / "mlflow.json").write_text(before)  # what the killed driver had saved

    again = SweepRecord(sweep, folder)
    again.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 1, "val_accuracy": 0.5})  # re-run epoch
    again.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 2, "val_accuracy": 0.6})
    again.flush()
    client = MlflowClient(again.uri)
    runs = client.search_runs([again.experiment_id], "tags.tuner.trial_id = 't_00000'")
    assert len(runs) == 1
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "val_accuracy")]
    assert sorted(steps) == [1, 2]


def test_epochs_queued_when_the_driver_died_are_written_from_the_history(tmp_path):
    """Epochs are written to MLflow in batches; those a killed driver still held are
    written on resume from the history (which the driver appends first), once each."""
    from mlflow.tracking import MlflowClient

    from tuner.folder.records import append_history, trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "queued", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "queued")
    (folder.root / "tune").mkdir(parents=True)
    folder.history.mkdir()
    record = SweepRecord(sweep, folder)
    for epoch, accuracy in ((1, 0.5), (2, 0.6), (3, 0.7)):
        result = {"trial_id": "t_00000", "training_iteration": epoch, "val_accuracy": accuracy}
        append_history(folder, "t_00000", result)
        record.log_result("t_00000", {"lr": 0.001}, result)
        if epoch == 1:
            record.flush()
    client = MlflowClient(record.uri)
    run_id = record.trials["t_00000"]
    assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == [1]  # 2 and 3 still queued
    del record  # the driver is killed here

    again = SweepRecord(sweep, folder)
    again.backfill(trial_histories(folder))
    again.backfill(trial_histories(folder))  # a second resume writes nothing twice
    history = client.get_metric_history(run_id, "val_accuracy")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.6), (3, 0.7)]


def test_epochs_written_before_mlflow_json_could_be_saved_are_not_written_twice(tmp_path):
    """A full disk (or a kill) between an epoch's log_batch and mlflow.json's save leaves
    mlflow.json's last step behind MLflow: the resume asks MLflow, and writes each epoch once."""
    from mlflow.tracking import MlflowClient

    from tuner.folder.records import append_history, trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "behind", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "behind")
    (folder.root / "tune").mkdir(parents=True)
    folder.history.mkdir()
    record = SweepRecord(sweep, folder)
    record.trial_run("t_00000", {"lr": 0.001})
    saved = (folder.root / "mlflow.json").read_text()  # knows the run, no epoch yet
    result = {"trial_id": "t_00000", "training_iteration": 1, "val_accuracy": 0.5}
    append_history(folder, "t_00000", result)
    # A sweep's MLflow writer thread stamps an epoch later than the history does (an exact
    # repeat, time included, MLflow would drop by itself).
    record.log_result("t_00000", {"lr": 0.001}, result, stamp=time.time() + 1)
    record.flush()  # epoch 1 is in MLflow ...
    (folder.root / "mlflow.json").write_text(saved)  # ... but mlflow.json's save did not land
    run_id = record.trials["t_00000"]
    del record

    again = SweepRecord(sweep, folder)
    again.backfill(trial_histories(folder))
    again.log_result("t_00000", {}, result)  # epoch 1 re-run from the start: Tune had no checkpoint
    again.log_result("t_00000", {}, {**result, "training_iteration": 2, "val_accuracy": 0.6})
    again.flush()
    history = MlflowClient(again.uri).get_metric_history(run_id, "val_accuracy")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.6)]


@pytest.mark.parametrize("made", [False, True], ids=["run never made", "run made, not recorded"])
def test_epochs_of_a_trial_whose_run_the_killed_driver_had_not_recorded_are_written(tmp_path, made):
    """MLflow writes wait behind the store's opening, slow on a loaded machine: a driver
    killed there leaves a history for a trial that mlflow.json does not name (its run never
    made, or made and not yet saved). When the resumed trial reports again, its run holds
    every epoch from 1, once each."""
    from mlflow.tracking import MlflowClient

    from tuner.folder.records import append_history, trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "late", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "late")
    (folder.root / "tune").mkdir(parents=True)
    folder.history.mkdir()
    record = SweepRecord(sweep, folder)
    saved = (folder.root / "mlflow.json").read_text()  # the parent run, no trial
    if made:
        record.log_result(
            "t_00000", {"lr": 0.001}, {"trial_id": "t_00000", "training_iteration": 1, "val_accuracy": 0.5}
        )
        record.flush()
        (folder.root / "mlflow.json").write_text(saved)
    for epoch, accuracy in ((1, 0.5), (2, 0.6), (3, 0.7)):
        row = {"trial_id": "t_00000", "training_iteration": epoch, "val_accuracy": accuracy}
        append_history(folder, "t_00000", row)
    del record  # the driver is killed here

    again = SweepRecord(sweep, folder)
    again.backfill(trial_histories(folder))
    # The trial restarts from its checkpoint of epoch 2 and re-runs epoch 3.
    again.log_result("t_00000", {"lr": 0.001}, {"trial_id": "t_00000", "training_iteration": 3, "val_accuracy": 0.7})
    again.log_result("t_00000", {"lr": 0.001}, {"trial_id": "t_00000", "training_iteration": 4, "val_accuracy": 0.8})
    again.flush()
    client = MlflowClient(again.uri)
    [run] = client.search_runs([again.experiment_id], "tags.tuner.trial_id = 't_00000'")
    history = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]
    assert run.data.params["lr"] == "0.001"


def test_a_run_whose_creation_lost_its_answer_is_adopted_when_the_write_is_tried_again(tmp_path):
    """A tracking server killed as it answered ``create_run`` had made the run: the write,
    kept and tried again once the server is back, adopts that run (one run per trial, with
    its values and every epoch), not a second one that leaves the first empty."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_outage import unreachable
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "lost", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "lost")
    (folder.root / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, folder)
    record.trial_run("t_00000", {"lr": 0.001})  # a first trial: the store's runs are asked for once here

    real = record.client
    lost = MlflowException(
        "API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/create failed with exception "
        "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded with url: /api/2.0/mlflow/runs/create "
        "(Caused by ProtocolError('Connection aborted.', RemoteDisconnected('Remote end closed connection')))"
    )
    assert unreachable(lost)  # what the writer keeps for later, as it did here

    class AnswerLost:  # the run is made; its answer never arrives
        def __getattr__(self, name):
            if name != "create_run":
                return getattr(real, name)

            def create_run(*args, **kwargs):
                real.create_run(*args, **kwargs)
                raise lost

            return create_run

    record.client = AnswerLost()
    with pytest.raises(MlflowException):
        record.trial_run("t_00001", {"lr": 0.002})
    record.client = real  # the server is back: the kept write again
    run_id = record.trial_run("t_00001", {"lr": 0.002})
    record.log_result("t_00001", {"lr": 0.002}, {"training_iteration": 1, "val_accuracy": 0.5})
    record.flush()

    client = MlflowClient(record.uri)
    runs = client.search_runs([record.experiment_id], "tags.tuner.trial_id = 't_00001'")
    assert [run.info.run_id for run in runs] == [run_id]
    assert runs[0].data.params == {"lr": "0.002"}
    assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == [1]


def test_a_trials_values_go_with_its_first_batch_and_stay_due_until_a_write_gives_them(tmp_path):
    """A short trial's run costs three calls: create_run, one log_batch (its values, its
    epochs, its status) and set_terminated. A batch that fails (the server away) leaves the
    values due: the write tried again gives the run every value, once."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from tuner.folder.store import SweepFolder
    from tuner.tracking.mlflow_outage import unreachable
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "calls", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "calls")
    (folder.root / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, folder)
    real, calls, failing = record.client, [], []
    away = MlflowException("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch: Connection refused")
    assert unreachable(away)

    class Counted:
        def __getattr__(self, name):
            def call(*args, **kwargs):
                calls.append(name)
                if name == "log_batch" and failing:
                    failing.pop()
                    raise away
                return getattr(real, name)(*args, **kwargs)

            return call

    record.client = Counted()
    record.trial_run("t_00000", {"lr": 0.001})  # the store's runs are asked for once, at the first trial
    calls.clear()
    values = {"lr": 0.002, "width": 16}
    record.trial_run("t_00001", values)
    for epoch in (1, 2, 3):
        record.log_result("t_00001", values, {"training_iteration": epoch, "val_accuracy": epoch / 4})
    record.end_trial("t_00001", values, "finished")
    assert calls == ["create_run", "log_batch", "set_terminated"]

    record.log_result("t_00000", {"lr": 0.001}, {"training_iteration": 1, "val_accuracy": 0.5})
    failing.append(True)
    with pytest.raises(MlflowException):
        record.end_trial("t_00000", {"lr": 0.001}, "finished")
    record.end_trial("t_00000", {"lr": 0.001}, "finished")  # the kept write, once the server is back

    client = MlflowClient(record.uri)
    first, second = (client.get_run(record.trials[t]) for t in ("t_00000", "t_00001"))
    assert first.data.params == {"lr": "0.001"} and first.info.status == "FINISHED"
    assert second.data.params == {"lr": "0.002", "width": "16"} and second.info.status == "FINISHED"
    assert second.data.tags["tuner.status"] == "finished"
    assert [m.step for m in client.get_metric_history(second.info.run_id, "val_accuracy")] == [1, 2, 3]


def test_a_trial_resumed_from_its_last_epochs_checkpoint_is_finished_in_mlflow_as_in_status(tmp_path):
    """A trial that finished, whose end Tune's saved state missed (the driver was killed),
    is restored from its own checkpoint of its last epoch and ends without a report: Tune's
    last result is then the saved state's, epochs behind. Its run says ``finished``, as
    ``tuner status`` (the history) does; a trial the scheduler stopped early still says so."""
    from types import SimpleNamespace

    from tuner.folder.records import append_history
    from tuner.folder.store import SweepFolder
    from tuner.tracking.callbacks import _status

    folder = SweepFolder(tmp_path / "runs" / "resumed")
    folder.history.mkdir(parents=True)
    for epoch in range(1, 11):
        append_history(folder, "t_00000", {"trial_id": "t_00000", "training_iteration": epoch, "val_accuracy": 0.5})
    for epoch in range(1, 4):
        append_history(folder, "t_00001", {"trial_id": "t_00001", "training_iteration": epoch, "val_accuracy": 0.1})
    behind = SimpleNamespace(trial_id="t_00000", status="TERMINATED", last_result={"training_iteration": 8})
    stopped = SimpleNamespace(trial_id="t_00001", status="TERMINATED", last_result={"training_iteration": 3})
    assert _status(behind, 10, ended=True, folder=folder) == "finished"
    assert _status(behind, 10, ended=True) == "stopped_early"  # Tune's last result alone: what it said before
    assert _status(stopped, 10, ended=True, folder=folder) == "stopped_early"


def test_a_trial_whose_end_a_killed_driver_had_not_written_is_ended_by_the_resumed_sweep(tmp_path):
    """The driver was killed after Tune had saved a trial as ended and before its end was
    written: the resumed sweep never runs that trial again, and its run must not stay
    RUNNING without its values and status. The sweep's end writes them; a trial whose run an
    earlier driver ended costs no call."""
    from mlflow.tracking import MlflowClient

    from tuner.folder.records import append_history
    from tuner.folder.store import SweepFolder
    from tuner.tracking.writer import MlflowWriter

    sweep = SweepConfig.model_validate({"name": "window", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "window")
    (folder.root / "tune").mkdir(parents=True)
    folder.history.mkdir()
    values = {"t_00000": {"lr": "0.001"}, "t_00001": {"lr": "0.002"}}
    first = MlflowWriter(sweep, folder)
    first.open()
    for trial_id, config in values.items():
        first.trial_start(trial_id, config)
        for epoch in (1, 2):
            row = {"trial_id": trial_id, "training_iteration": epoch, "val_accuracy": epoch / 4}
            append_history(folder, trial_id, row)
            first.result(trial_id, config, row)
    first.end("t_00000", values["t_00000"], "finished")
    first.record.flush(save=True)
    del first  # killed: t_00001's end, which Tune saved, never reached the writer

    again = MlflowWriter(sweep, folder)
    again.open()
    real, calls = again.record.client, []

    class Counted:
        def __getattr__(self, name):
            def call(*args, **kwargs):
                calls.append((name, args[0] if args else None))
                return getattr(real, name)(*args, **kwargs)

            return call

    again.record.client = Counted()
    again.experiment_end([(t, config, "finished") for t, config in values.items()])

    client = MlflowClient(again.record.uri)
    ended, unended = (client.get_run(again.record.trials[t]) for t in values)
    assert ended.info.run_id not in {run_id for _, run_id in calls}
    assert unended.info.status == "FINISHED" and unended.data.tags["tuner.status"] == "finished"
    assert unended.data.params == {"lr": "0.002"}
    assert [m.step for m in client.get_metric_history(unended.info.run_id, "val_accuracy")] == [1, 2]
    assert ended.info.status == "FINISHED" and ended.data.params == {"lr": "0.001"}
