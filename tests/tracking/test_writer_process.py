"""The MLflow writer's process (tuner/tracking/writer.py), driven as the sweep's Tune callback
drives it, without Ray: a real child process, a real sqlite store. What it writes, what
comes back to the driver, and what happens when the writer or the driver dies."""

from __future__ import annotations

import os
import signal
import time

import pytest
from mlflow.tracking import MlflowClient

from tuner import console
from tuner.errors import TunerError
from tuner.folder import records
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import writer
from tuner.tracking.mlflow_runs import tracking_uri

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sweep_in(tmp_path, monkeypatch):
    """A sweep config and its folder, the lines the writer says collected; its writes in a
    process (a sweep of 10 trials would write from a thread)."""
    monkeypatch.setattr(writer, "PROCESS_FROM", 1)
    sweep = SweepConfig.model_validate({"name": "writer", "output_dir": str(tmp_path / "runs")})
    folder = SweepFolder(tmp_path / "runs" / "writer")
    (folder.root / "tune").mkdir(parents=True)
    folder.history.mkdir()
    said: list[str] = []
    token = console.SAYING.set(said.append)
    yield sweep, folder, said
    console.SAYING.reset(token)


def _epochs(sweep: SweepConfig, trial_id: str) -> list[tuple[int, float]]:
    client = MlflowClient(tracking_uri(sweep))
    (run,) = client.search_runs(
        [client.get_experiment_by_name(sweep.name).experiment_id], f"tags.tuner.trial_id = '{trial_id}'"
    )
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "val_accuracy")), run


def _report(process: writer.WriterProcess, folder: SweepFolder, trial_id: str, epoch: int, accuracy: float) -> None:
    result = {"trial_id": trial_id, "training_iteration": epoch, "val_accuracy": accuracy}
    records.append_history(folder, trial_id, result)  # as the driver's records do, first
    process.send("result", trial_id, {"lr": "0.001"}, result)


def test_events_are_written_in_order_and_a_failed_write_is_raised_in_the_driver(sweep_in):
    sweep, folder, said = sweep_in
    writer.start_ahead(sweep)  # as the sweep does before Ray starts; its callback takes this one
    ahead = writer._AHEAD[0].process.pid
    process = writer.start(sweep, folder, tracking_uri(sweep))
    assert process.process.pid == ahead and writer._AHEAD == []
    process.send("trial_start", "t_00000", {"lr": "0.001"})
    for epoch, accuracy in ((1, 0.5), (2, 0.6), (3, 0.7)):
        _report(process, folder, "t_00000", epoch, accuracy)
    process.send("end", "t_00000", {"lr": "0.001"}, "finished")
    process.send("experiment_end", [("t_00000", {"lr": "0.001"}, "finished")])
    process.send("no such event")  # a bug of ours: raised in the driver, the records kept
    with pytest.raises(TunerError, match="an event it does not know: 'no such event'"):
        process.close()
    assert process.process.returncode == 0 and process.cpu_s > 0

    epochs, run = _epochs(sweep, "t_00000")
    assert epochs == [(1, 0.5), (2, 0.6), (3, 0.7)]
    assert run.info.status == "FINISHED" and run.data.tags["tuner.status"] == "finished"
    assert run.data.params == {"lr": "0.001"}
    assert said == [] and records.mlflow_behind(folder) is None


def test_a_writer_that_dies_leaves_the_sweep_going_and_its_records_to_resume(sweep_in):
    sweep, folder, said = sweep_in
    process = writer.start(sweep, folder, tracking_uri(sweep))
    process.send("trial_start", "t_00000", {"lr": "0.001"})
    os.kill(process.process.pid, signal.SIGKILL)  # the kernel's OOM killer, say
    process.process.wait()
    for epoch in range(1, 4):  # the sweep goes on: no event raises
        _report(process, folder, "t_00000", epoch, epoch / 10)
    process.send("end", "t_00000", {"lr": "0.001"}, "finished")
    process.close()
    assert said == ["MLflow's writer process exited (code -9); the sweep goes on, its records kept in the history"]
    assert records.mlflow_behind(folder) == "MLflow's writer process exited (code -9)"

    # what a resume does: a new writer writes what the history holds
    again = writer.start(sweep, folder, tracking_uri(sweep))
    again.send("experiment_end", [("t_00000", {"lr": "0.001"}, "finished")])
    again.close()
    assert _epochs(sweep, "t_00000")[0] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert records.mlflow_behind(folder) is None


def test_a_killed_driver_leaves_no_writer_and_what_it_held_is_written(sweep_in):
    """SIGINT and SIGTERM are the driver's to act on; the socket closing is the writer's
    signal that the driver is gone: it writes the epochs it still held, and exits."""
    sweep, folder, _ = sweep_in
    process = writer.start(sweep, folder, tracking_uri(sweep))
    process.send("trial_start", "t_00000", {"lr": "0.001"})
    _report(process, folder, "t_00000", 1, 0.5)  # queued: written within FLUSH_S, or at the end
    for stop in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or a stop sent to the whole group
        os.kill(process.process.pid, stop)
    time.sleep(0.5)
    assert process.process.poll() is None
    process.connection.close()  # the driver's end of the socket, as its death closes it
    assert process.process.wait(timeout=30) == 0
    assert _epochs(sweep, "t_00000")[0] == [(1, 0.5)]


def test_a_writer_started_ahead_for_a_sweep_that_never_began_exits(sweep_in):
    """A sweep refused after Ray started (before Tune set up its callbacks) takes no writer."""
    writer.start_ahead(sweep_in[0])
    (unused,) = writer._AHEAD
    writer.drop_ahead()
    assert writer._AHEAD == []
    assert unused.process.wait(timeout=60) == 0


def test_a_sweep_of_few_trials_writes_from_a_thread_by_the_same_rules(sweep_in, monkeypatch):
    """Below ``PROCESS_FROM`` trials: no process to start; the same events, the same records,
    a failed write raised the same way."""
    sweep, folder, said = sweep_in
    monkeypatch.setattr(writer, "PROCESS_FROM", 100)
    writer.start_ahead(sweep)
    assert writer._AHEAD == []
    thread = writer.start(sweep, folder, tracking_uri(sweep))
    assert isinstance(thread, writer.WriterThread)
    thread.send("trial_start", "t_00000", {"lr": "0.001"})
    for epoch, accuracy in ((1, 0.5), (2, 0.6)):
        _report(thread, folder, "t_00000", epoch, accuracy)
    thread.send("end", "t_00000", {"lr": "0.001"}, "finished")
    thread.send("experiment_end", [("t_00000", {"lr": "0.001"}, "finished")])
    thread.send("no such event")
    with pytest.raises(TunerError, match="an event it does not know"):
        thread.close()
    epochs, run = _epochs(sweep, "t_00000")
    assert epochs == [(1, 0.5), (2, 0.6)] and run.info.status == "FINISHED" and said == []


def test_a_process_for_many_trials_unless_a_short_time_budget_ends_the_sweep_first():
    def sweep(**trials: float) -> SweepConfig:
        return SweepConfig.model_validate({"name": "writer", "trials": trials})

    assert writer.in_process(sweep(num_samples=480)) and writer.in_process(sweep(num_samples=480, time_budget_s=600))
    assert not writer.in_process(sweep(num_samples=99))
    assert not writer.in_process(sweep(num_samples=480, time_budget_s=12))  # its start is not paid back


def _best_model(folder: SweepFolder) -> tuple[dict, object]:
    """A small CNN exported as a sweep's best, and its metrics (as the export leaves them)."""
    import json

    import numpy as np
    import yaml

    from tuner.models.builtin import build_model
    from tuner.results.export import ExportedModel

    data = {"dataset": "mnist", "mean": [0.1307], "std": [0.3081], "channels": 1, "size": 28, "num_classes": 10}
    best = {"trial_id": "t_00000", "epoch": 2, "val_accuracy": 0.6, "test_accuracy": 0.55, "test_images": 100}
    folder.best.mkdir()
    (folder.best / "config.yaml").write_text(yaml.safe_dump({"data": data}))
    (folder.best / "metrics.json").write_text(json.dumps(best))
    model = build_model("cnn", in_channels=1, num_classes=10, image_size=28, options={"conv1": 2, "conv2": 4})
    return best, ExportedModel(model, {"data": data}, best, example=np.zeros((2, 1, 28, 28), dtype=np.uint8))


@pytest.mark.parametrize("trials", [1, 100], ids=["thread", "process"])
def test_the_sweeps_last_writes_are_made_by_its_writer_once_tune_has_ended(sweep_in, monkeypatch, tmp_path, trials):
    """The sweep's driver keeps its writer open past Tune's end and has it log and register
    the best model (its store open, MLflow imported there), from the files the driver made."""
    from tuner.tracking.mlflow_model import served_files

    sweep, folder, said = sweep_in
    monkeypatch.setattr(writer, "PROCESS_FROM", 100)
    sweep = sweep.model_copy(update={"trials": sweep.trials.model_copy(update={"num_samples": trials})})
    best, exported = _best_model(folder)
    with writer.held_open():
        kept = writer.start(sweep, folder, tracking_uri(sweep))
        assert isinstance(kept, writer.WriterProcess if trials == 100 else writer.WriterThread)
        kept.send("trial_start", "t_00000", {"lr": "0.001"})
        _report(kept, folder, "t_00000", 1, 0.6)
        kept.send("end", "t_00000", {"lr": "0.001"}, "finished")
        kept.send("ready_model_logging")
        kept.send("experiment_end", [("t_00000", {"lr": "0.001"}, "finished")])
        assert writer.hold(kept) and writer.take_held() is kept and writer.take_held() is None
        files = served_files(exported, tmp_path)
        assert kept.ask("finish", best, folder.best, files) == (True, "1")
        with pytest.raises(TunerError, match="asked for a write it does not make: 'delete_everything'"):
            kept.ask("delete_everything")
        writer.hold(kept)  # left for held_open to close
    assert kept.closed

    client = MlflowClient(tracking_uri(sweep))
    (version,) = client.search_model_versions("name='mnist_cnn'")
    parent = client.get_run(version.run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["best_test_accuracy"] == pytest.approx(0.55)
    assert version.tags["trial_id"] == "t_00000"
    assert records.read_mlflow_state(folder)["model"] == {"trial_id": "t_00000", "epoch": 2, "version": "1"}
    assert said == [] and records.mlflow_behind(folder) is None


def test_a_writer_gone_before_the_sweeps_last_writes_leaves_them_to_the_resume(sweep_in):
    sweep, folder, said = sweep_in
    best, exported = _best_model(folder)
    process = writer.start(sweep, folder, tracking_uri(sweep))
    process.send("experiment_end", [])
    os.kill(process.process.pid, signal.SIGKILL)
    process.process.wait()
    assert process.ask("finish", best, folder.best, None) == (False, None)
    process.close()
    assert records.mlflow_behind(folder) == "MLflow's writer process exited (code -9)"
    assert MlflowClient(tracking_uri(sweep)).search_model_versions("name='mnist_cnn'") == []
