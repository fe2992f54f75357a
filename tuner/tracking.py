"""MLflow records: one parent run per sweep, one nested run per trial, the model registered.

Only the sweep's driver process writes to MLflow (a Tune callback), so concurrent
trials never contend for the sqlite store. ``<sweep>/mlflow.json`` maps trials to
their runs, so a resumed sweep, a PBT clone or a retried trial keeps writing to the
run it already has (no duplicates) and each metric history stays monotone in step.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.config import SweepConfig

STATE_FILE = "mlflow.json"
TRIAL_METRICS = ("train_loss", "val_loss", "val_accuracy", "lr", "compute_s", "images_per_s")


def tracking_uri(sweep: SweepConfig) -> str:
    """The config's URI, else $MLFLOW_TRACKING_URI, else sqlite beside the outputs."""
    configured = sweep.tracking.mlflow.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    return f"sqlite:///{Path(sweep.output_dir).expanduser().resolve() / 'mlflow.db'}"


def registered_model_name(sweep: SweepConfig) -> str:
    return sweep.tracking.mlflow.registered_model or f"{sweep.data.dataset}_{sweep.model.name}"


class SweepRecord:
    """The sweep's parent run and the trial -> run map, persisted beside the outputs."""

    def __init__(self, sweep: SweepConfig, sweep_dir: Path):
        from mlflow.tracking import MlflowClient

        self.sweep = sweep
        self.uri = tracking_uri(sweep)
        self.client = MlflowClient(self.uri)
        self.state_path = sweep_dir / STATE_FILE
        state = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        self.trials: dict[str, str] = state.get("trials", {})
        self.last_step: dict[str, int] = state.get("last_step", {})
        self.experiment_id = state.get("experiment_id") or self._experiment_id()
        self.parent_run_id = state.get("parent_run_id") or self._start_parent(sweep_dir)
        self.client.update_run(self.parent_run_id, status="RUNNING")
        self.save()

    def _experiment_id(self) -> str:
        name = self.sweep.tracking.mlflow.experiment or self.sweep.name
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        artifacts = None
        if self.uri.startswith("sqlite:///"):  # keep artifacts beside the store, not in ./mlruns
            artifacts = (Path(self.uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
        # The kind tag opens the UI on the training-runs view rather than the GenAI one.
        tags = {"mlflow.experimentKind": "custom_model_development"}
        return self.client.create_experiment(name, artifact_location=artifacts, tags=tags)

    def _start_parent(self, sweep_dir: Path) -> str:
        sweep = self.sweep
        run = self.client.create_run(
            self.experiment_id,
            run_name=sweep.name,
            tags={"tuner.kind": "sweep", "tuner.sweep": sweep.name, "tuner.output": str(sweep_dir)},
        )
        run_id = run.info.run_id
        params = {
            "searcher": sweep.searcher.name,
            "scheduler": sweep.scheduler.name,
            "metric": sweep.metric,
            "mode": sweep.mode,
            "num_samples": sweep.trials.num_samples,
            "max_epochs": sweep.max_epochs,
            "model": sweep.model.name,
            "dataset": sweep.data.dataset,
            "workers_per_trial": sweep.scaling.workers,
        }
        params.update({f"searcher.{k}": v for k, v in sweep.searcher.model_dump().items() if k != "name"})
        params.update({f"scheduler.{k}": v for k, v in sweep.scheduler.model_dump(mode="json").items() if k != "name"})
        _log_params(self.client, run_id, params)
        config_file = sweep_dir / "sweep.yaml"
        if config_file.is_file():
            self.client.log_artifact(run_id, str(config_file))
        return run_id

    def save(self) -> None:
        state = {
            "tracking_uri": self.uri,
            "experiment_id": self.experiment_id,
            "parent_run_id": self.parent_run_id,
            "trials": self.trials,
            "last_step": self.last_step,
        }
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_path)

    def trial_run(self, trial_id: str, config: dict[str, Any]) -> str:
        """The trial's child run, created once (a restarted trial keeps its run)."""
        if trial_id in self.trials:
            return self.trials[trial_id]
        run = self.client.create_run(
            self.experiment_id,
            run_name=trial_id,
            tags={
                "mlflow.parentRunId": self.parent_run_id,
                "tuner.kind": "trial",
                "tuner.trial_id": trial_id,
                "tuner.status": "running",
                "tuner.sweep": self.sweep.name,
            },
        )
        _log_params(self.client, run.info.run_id, config)
        self.trials[trial_id] = run.info.run_id
        self.save()
        return run.info.run_id

    def log_result(self, trial_id: str, config: dict[str, Any], result: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        run_id = self.trial_run(trial_id, config)
        step = int(result["training_iteration"])
        if step <= self.last_step.get(trial_id, 0):
            return  # an epoch re-run after a restore: keep the history monotone
        stamp = int(time.time() * 1000)
        metrics = [Metric(k, float(result[k]), stamp, step) for k in TRIAL_METRICS if k in result]
        self.client.log_batch(run_id, metrics=metrics)
        self.last_step[trial_id] = step
        self.save()

    def end_trial(self, trial_id: str, config: dict[str, Any], status: str) -> None:
        run_id = self.trial_run(trial_id, config)
        self.client.set_tag(run_id, "tuner.status", status)
        self.client.set_terminated(run_id, status="FAILED" if status == "errored" else "FINISHED")

    def finish(self, best: dict[str, Any], best_dir: Path, model: Any, example: Any) -> str | None:
        """Log the best metrics and model on the parent run, register it; returns the version."""
        import mlflow
        import mlflow.pytorch

        parent = self.parent_run_id
        for key in ("val_accuracy", "val_loss", "test_accuracy", "test_loss"):
            self.client.log_metric(parent, f"best_{key}", float(best[key]))
        self.client.set_tag(parent, "tuner.best_trial_id", best["trial_id"])
        for name in ("config.yaml", "metrics.json"):
            self.client.log_artifact(parent, str(best_dir / name), artifact_path="best")
        name = registered_model_name(self.sweep)
        with _fluent_uri(self.uri), mlflow.start_run(run_id=parent):
            info = mlflow.pytorch.log_model(
                model,
                name="model",
                input_example=example,
                registered_model_name=name,
                # Stated, not inferred: inference imports the model in a subprocess (~8 s).
                pip_requirements=_model_requirements(),
            )
        version = getattr(info, "registered_model_version", None)
        if version is not None:
            for key, value in (
                ("sweep", self.sweep.name),
                ("trial_id", best["trial_id"]),
                ("test_accuracy", f"{best['test_accuracy']:.4f}"),
            ):
                self.client.set_model_version_tag(name, str(version), key, value)
        self.client.set_terminated(parent, status="FINISHED")
        return str(version) if version is not None else None

    def fail(self) -> None:
        self.client.set_terminated(self.parent_run_id, status="KILLED")


def _model_requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{package}=={version(package)}" for package in ("torch", "numpy", "mlflow")]


@contextlib.contextmanager
def _fluent_uri(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API at ``uri`` for a moment.

    ``mlflow.set_tracking_uri`` also exports MLFLOW_TRACKING_URI, which would send every
    later sweep of this process (and its child processes) to this sweep's store.
    """
    import mlflow

    previous_uri, previous_env = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous_uri)
        if previous_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous_env


def _log_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(str(k), str(_plain(v))) for k, v in params.items()]
    for begin in range(0, len(items), 100):  # MLflow's batch limit
        client.log_batch(run_id, params=items[begin : begin + 100])


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def make_callback(sweep: SweepConfig, sweep_dir: Path) -> Any:
    """A Tune callback that mirrors trial events into the sweep's MLflow record.

    It holds only the config and folder (it is pickled with the experiment, for
    resume) and opens the record in ``setup``, which Tune calls on every (re)start.
    """
    from ray.tune import Callback

    max_epochs = sweep.max_epochs

    class MlflowTrials(Callback):
        def __init__(self) -> None:
            self.record: SweepRecord | None = None

        def setup(self, **info: Any) -> None:
            self.record = SweepRecord(sweep, sweep_dir)

        def on_trial_start(self, iteration, trials, trial, **info):
            self.record.trial_run(trial.trial_id, trial.config)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.record.log_result(trial.trial_id, trial.config, result)

        def on_trial_complete(self, iteration, trials, trial, **info):
            epochs = int((trial.last_result or {}).get("training_iteration", 0))
            status = "finished" if epochs >= max_epochs else "stopped_early"
            self.record.end_trial(trial.trial_id, trial.config, status)

        def on_trial_error(self, iteration, trials, trial, **info):
            self.record.end_trial(trial.trial_id, trial.config, "errored")

        def on_trial_recover(self, iteration, trials, trial, **info):
            run_id = self.record.trial_run(trial.trial_id, trial.config)
            self.record.client.set_tag(run_id, "tuner.status", "retrying")

        def __getstate__(self) -> dict[str, Any]:
            return {"record": None}  # the MLflow client is reopened in setup()

    return MlflowTrials()


# --- the sweep's own epoch history ---------------------------------------------------------
HISTORY_DIR = "history"
HISTORY_KEYS = (
    "trial_id",
    "training_iteration",
    "epoch",
    *TRIAL_METRICS,
    "resumed_from",
    "world_size",
    "time_total_s",
    "entered_at",  # wall clock: the trial function began ...
    "first_step_at",  # ... and its first training step began (per start or restart)
)
TIMELINE_FILE = "timeline.jsonl"


def append_history(sweep_dir: Path, trial_id: str, result: dict[str, Any]) -> bool:
    """Append one epoch to ``history/<trial>.jsonl``; False if it replaced re-run epochs.

    Tune's own result.json is staged in Ray's session folder and copied back stale when
    a trial restarts (PBT, retries, resume), losing epochs; this log is written by the
    driver as each result arrives and never rewritten.
    """
    folder = sweep_dir / HISTORY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trial_id}.jsonl"
    step = int(result["training_iteration"])
    row = {key: _plain(result[key]) for key in HISTORY_KEYS if key in result}
    rows = read_history(path)
    if any(old["training_iteration"] >= step for old in rows):
        # A restored trial re-ran epochs whose checkpoints were lost (a crash before
        # Tune saved its state): the re-run is the lineage that continues, and the one
        # whose checkpoints exist, so it replaces them.
        kept = [old for old in rows if old["training_iteration"] < step]
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(old) + "\n" for old in [*kept, row]))
        tmp.replace(path)
        return False
    with open(path, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    return True


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trial_histories(sweep_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every epoch every trial reported, by trial id, in order."""
    return {p.stem: read_history(p) for p in sorted((sweep_dir / HISTORY_DIR).glob("*.jsonl"))}


def make_history_callback(sweep_dir: Path) -> Any:
    from ray.tune import Callback

    class TrialHistory(Callback):
        """Each epoch to ``history/<trial>.jsonl``; trial starts and ends to ``timeline.jsonl``."""

        def on_trial_result(self, iteration, trials, trial, result, **info):
            append_history(sweep_dir, trial.trial_id, result)

        def on_trial_start(self, iteration, trials, trial, **info):
            self._event(trial, "start")

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._event(trial, "end")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._event(trial, "error")

        def on_trial_recover(self, iteration, trials, trial, **info):
            self._event(trial, "recover")

        def _event(self, trial: Any, event: str) -> None:
            row = {"time": time.time(), "trial_id": trial.trial_id, "event": event}
            with open(sweep_dir / TIMELINE_FILE, "a") as handle:
                handle.write(json.dumps(row) + "\n")

    return TrialHistory()
