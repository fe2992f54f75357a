"""MLflow records: one parent run per sweep, one nested run per trial, the model registered.

Only a sweep's driver process writes to MLflow (a Tune callback), so its concurrent
trials never contend for the sqlite store. Several sweeps may share one store (the
default ``<output_dir>/mlflow.db``): its creation is serialised with a file lock and
every call that meets "database is locked" is retried with back-off (mlflow_store.py), so
no record is lost. ``<sweep>/mlflow.json`` (kept by tuner/folder/records.py) maps trials to their runs, so a
resumed sweep, a PBT clone or a retried trial keeps writing to the run it already has
(no duplicates) and each metric history stays monotone in step.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import constraints, records, remote, store
from tuner.folder.records import trial_metrics
from tuner.folder.store import SweepFolder
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import mlflow_model, mlflow_store

FLUSH_S = 2.0  # the longest a trial's epoch waits to be written to MLflow


NO_FEASIBLE_TAG = "tuner.no_feasible_trial"  # the parent run of a sweep that ended with none feasible: why


def tracking_uri(sweep: SweepConfig) -> str:
    """The config's URI, else $MLFLOW_TRACKING_URI, else sqlite beside the outputs."""
    configured = sweep.tracking.mlflow.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    if remote.is_remote(sweep.output_dir):
        raise TunerError(
            f"tracking.mlflow.tracking_uri: output_dir {sweep.output_dir!r} is a storage URI, where MLflow's "
            "default sqlite file cannot live; set tracking.mlflow.tracking_uri (an MLflow server, "
            "e.g. http://mlflow:5000, or sqlite:////abs/path/mlflow.db) or $MLFLOW_TRACKING_URI, "
            "or tracking.mlflow.enabled=false"
        )
    return f"sqlite:///{Path(sweep.output_dir).expanduser().resolve() / 'mlflow.db'}"


def sweep_uri(sweep: SweepConfig, folder: SweepFolder) -> str:
    """The store the sweep's records go to: the one its mlflow.json names (a resumed sweep
    keeps the store it began in), else the one the config gives."""
    return records.read_mlflow_state(folder).get("tracking_uri") or tracking_uri(sweep)


def registered_model_name(sweep: SweepConfig) -> str:
    from tuner.models.build import label

    model = label(sweep.model.name, sweep.model.model_dump(exclude={"name"}))
    return sweep.tracking.mlflow.registered_model or f"{sweep.data.dataset}_{model}"


class SweepRecord:
    """The sweep's parent run and the trial -> run map, persisted beside the outputs."""

    def __init__(self, sweep: SweepConfig, folder: SweepFolder):
        from mlflow.tracking import MlflowClient

        self.sweep = sweep
        self.folder = folder
        state = records.read_mlflow_state(folder)
        self.uri = state.get("tracking_uri") or tracking_uri(sweep)  # a resume keeps its store
        self.began_in = state.get("folder") or folder.where  # a copied or moved folder says where it began
        self.trials: dict[str, str] = state.get("trials", {})
        self.last_step: dict[str, int] = state.get("last_step", {})
        self.model: dict[str, Any] = state.get("model", {})  # what finish() registered (or only logged) last
        self.ended: dict[str, str] = state.get("ended", {})  # by trial: the status its run was ended with
        self.pending: dict[str, list[Any]] = {}  # epochs not yet written, by trial (see log_result)
        self.unrecorded: dict[str, list[dict[str, Any]]] = {}  # history of trials without a run yet (see backfill)
        self.params_seen: dict[str, set[str]] = {}  # by trial: the names of the values its run has or will have
        self.params_due: dict[str, dict[str, Any]] = {}  # by trial: values written with its run's next batch
        self.flushed_at = self.saved_at = time.monotonic()
        self.unsaved = False  # runs made or epochs written since mlflow.json was last saved
        with mlflow_store.creating_store(self.uri):
            self.client = mlflow_store.Retrying(MlflowClient(self.uri))
            self.experiment_id = state.get("experiment_id") or self._experiment_id()
        # Runs a killed driver made but had not yet saved in mlflow.json can only exist
        # under a parent run made before this one started.
        self._orphans: dict[str, str] | None = None if state.get("parent_run_id") else {}
        self.unanswered: set[str] = set()  # trials whose run's creation failed (see _new_trial_run)
        self.parent_artifacts: str = state.get("parent_artifacts", "")  # the parent run's artifact URI
        self.parent_run_id = state.get("parent_run_id") or self._start_parent()
        if not self.parent_artifacts:  # a sweep recorded before the URI was kept
            self.parent_artifacts = self.client.get_run(self.parent_run_id).info.artifact_uri
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
        try:
            return self.client.create_experiment(name, artifact_location=artifacts, tags=tags)
        except Exception:  # another sweep created it in between (a server store: no file lock)
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def _start_parent(self) -> str:
        sweep = self.sweep
        run = self.client.create_run(
            self.experiment_id,
            run_name=self.folder.root.name,  # the folder: a second run of a sweep is <name>-2
            tags={"tuner.kind": "sweep", "tuner.sweep": sweep.name, "tuner.output": self.folder.where},
        )
        run_id = run.info.run_id
        self.parent_artifacts = run.info.artifact_uri
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
        if self.folder.config.is_file():
            self.client.log_artifact(run_id, str(self.folder.config))
        return run_id

    def save(self) -> None:
        state = {
            "tracking_uri": self.uri,
            "folder": self.began_in,
            "experiment_id": self.experiment_id,
            "parent_run_id": self.parent_run_id,
            "parent_artifacts": self.parent_artifacts,
            "trials": self.trials,
            "last_step": self.last_step,
            "ended": self.ended,
            "model": self.model,
        }
        records.write_mlflow_state(self.folder, state)
        self.unsaved, self.saved_at = False, time.monotonic()

    def trial_run(self, trial_id: str, config: dict[str, Any]) -> str:
        """The trial's child run, created once (a restarted trial keeps its run)."""
        if trial_id in self.trials:
            return self.trials[trial_id]
        run_id = self._run_saved_too_late(trial_id)
        if run_id is not None and trial_id in self.unanswered:  # made, but its values may not be
            self.unanswered.discard(trial_id)
            self._log_new_params(trial_id, run_id, config)
        run_id = run_id or self._new_trial_run(trial_id, config)
        # Epochs a killed driver had for this trial before its run was recorded (backfill).
        for row in self.unrecorded.pop(trial_id, []):
            self.log_result(trial_id, {}, row, stamp=row.get("reported_at"))
        return run_id

    def _new_trial_run(self, trial_id: str, config: dict[str, Any]) -> str:
        tags = {
            "mlflow.parentRunId": self.parent_run_id,
            "tuner.kind": "trial",
            "tuner.trial_id": trial_id,
            "tuner.status": "running",
            "tuner.sweep": self.sweep.name,
        }
        try:
            run = self.client.create_run(self.experiment_id, run_name=trial_id, tags=tags)
        except Exception:
            # A server that went away as it answered may have made the run all the same (a
            # tracking server killed mid-request did): the write is tried again once it is
            # back, and must adopt that run (_run_saved_too_late, asked again), not make a
            # second one with none of the epochs.
            self._orphans = None
            self.unanswered.add(trial_id)
            raise
        self.trials[trial_id] = run.info.run_id
        self.unsaved = True  # saved with the next flush: a resumed sweep adopts a run it lost (_run_saved_too_late)
        self._log_new_params(trial_id, run.info.run_id, config)
        return run.info.run_id

    def _log_new_params(self, trial_id: str, run_id: str, config: dict[str, Any]) -> None:
        """Queue the trial's values its run has not been given, once each: all of them for a
        new run (or a run of an earlier driver's: the same values again), and those a trial is
        given after its run began (an Optuna objective's, suggested as it runs:
        tuner/search/define_by_run.py). They are written with the run's next ``log_batch``
        (``_write``), its epochs' or its end's: a run costs one call fewer."""
        seen = self.params_seen.setdefault(trial_id, set())
        new = {k: v for k, v in config.items() if k not in seen}
        if new:
            self.params_due.setdefault(trial_id, {}).update(new)
            seen.update(new)

    def _run_saved_too_late(self, trial_id: str) -> str | None:
        """A run this sweep created for the trial just before the driver was killed, before
        mlflow.json said so: adopt it (and the epochs it logged) rather than make a second."""
        if self._orphans is None:  # asked once per driver, not once per trial
            found = self.client.search_runs(
                [self.experiment_id], f"tags.mlflow.parentRunId = '{self.parent_run_id}'", max_results=50_000
            )
            self._orphans = {
                run.data.tags["tuner.trial_id"]: run.info.run_id
                for run in found
                if "tuner.trial_id" in run.data.tags and run.info.run_id not in self.trials.values()
            }
        run_id = self._orphans.pop(trial_id, None)
        if run_id is None:
            return None
        self.trials[trial_id] = run_id
        self.last_step[trial_id] = max(self.last_step.get(trial_id, 0), self._logged_step(run_id))
        self.save()
        return run_id

    def _logged_step(self, run_id: str) -> int:
        """The last epoch the run holds in MLflow itself (0 if none). An epoch's metrics are
        one ``log_batch``, so the sweep's metric stands for all of them."""
        return max((m.step for m in self.client.get_metric_history(run_id, self.sweep.metric)), default=0)

    def log_result(
        self, trial_id: str, config: dict[str, Any], result: dict[str, Any], stamp: float | None = None
    ) -> None:
        """Queue an epoch's metrics; they are written at most ``FLUSH_S`` later, one
        ``log_batch`` per trial, and at once when a trial ends or the sweep stops. (A write
        per result made the driver's MLflow writes grow with every result: 13 ms each on
        sqlite, and the trials wait for the driver.) Epochs a killed driver had not
        written yet are written from the history when the sweep resumes (``backfill``)."""
        from mlflow.entities import Metric

        run_id = self.trial_run(trial_id, config)
        self._log_new_params(trial_id, run_id, config)
        step = int(result["training_iteration"])
        queued = self.pending.get(trial_id, [])
        if step <= max(self.last_step.get(trial_id, 0), queued[-1].step if queued else 0):
            return  # an epoch re-run after a restore: keep the history monotone
        stamp_ms = int((stamp or time.time()) * 1000)
        metrics = [Metric(k, float(result[k]), stamp_ms, step) for k in trial_metrics(result)]
        self.pending.setdefault(trial_id, []).extend(metrics)
        if time.monotonic() - self.flushed_at >= FLUSH_S:
            self.flush()

    def flush(self, save: bool = False) -> None:
        """Write every queued epoch (one ``log_batch`` per trial), then mlflow.json if asked
        (``save``) or if it is ``FLUSH_S`` old. (Saved at every trial's start and end, the
        file, which names every trial, made the writes grow with the square of the trials.)
        A resumed sweep makes up for a file that lags: ``backfill`` and ``_run_saved_too_late``."""
        pending, self.pending = self.pending, {}
        for trial_id in [*pending, *(t for t in self.params_due if t not in pending)]:
            self._write(trial_id, pending.get(trial_id, []))
        self._save_if_due(save)
        self.flushed_at = time.monotonic()

    def _save_if_due(self, save: bool = False) -> None:
        if save or (self.unsaved and time.monotonic() - self.saved_at >= FLUSH_S):
            self.save()

    def _write(self, trial_id: str, metrics: list[Any], tags: list[Any] = ()) -> None:
        """One ``log_batch`` (more past MLflow's limits) with the trial's queued epochs, the
        values its run is due (``params_due``) and ``tags``. Values a failed write did not
        give the run stay due; epochs a failed write dropped are written from the history
        (``backfill``)."""
        run_id = self.trials[trial_id]
        due = self.params_due.pop(trial_id, {})
        params = _as_params(due)
        # MLflow's most per log_batch: 1000 metrics, 100 values, 100 tags, 1000 in all.
        batches = max(-(-len(metrics) // 800), -(-len(params) // 100), 1)
        try:
            for i in range(batches):
                self.client.log_batch(
                    run_id,
                    metrics=metrics[i * 800 : (i + 1) * 800],
                    params=params[i * 100 : (i + 1) * 100],
                    tags=list(tags) if i == 0 else [],
                )
        except Exception:
            if due:
                self.params_due[trial_id] = {**due, **self.params_due.get(trial_id, {})}
            raise
        if metrics:
            self.last_step[trial_id] = max(metric.step for metric in metrics)
            self.unsaved = True

    def backfill(self, histories: dict[str, list[dict[str, Any]]]) -> None:
        """Epochs the history has and this trial's run lacks (the driver was killed before
        a flush): queue them, with the time the driver had them, and write them.

        mlflow.json's ``last_step`` can lag MLflow: a driver killed, or out of disk, after a
        ``log_batch`` and before mlflow.json was saved. So where the history is ahead of it,
        MLflow is asked what the run holds (one query per such trial; none after a clean stop).

        A trial mlflow.json does not name has its run adopted here, if MLflow holds one (the
        file is saved every ``FLUSH_S``, not at every run made); a trial without a run (the
        driver was killed while its writes waited behind the store's opening) has its
        epochs written once its run is made, when the resumed trial reports with its config."""
        for trial_id in histories.keys() - self.trials.keys():
            self._run_saved_too_late(trial_id)  # a run made before mlflow.json was saved: adopt it now
        self.unrecorded = {trial_id: rows for trial_id, rows in histories.items() if trial_id not in self.trials}
        for trial_id, run_id in self.trials.items():
            rows = histories.get(trial_id, [])
            if max((row["training_iteration"] for row in rows), default=0) > self.last_step.get(trial_id, 0):
                self.last_step[trial_id] = max(self.last_step.get(trial_id, 0), self._logged_step(run_id))
            for row in rows:
                self.log_result(trial_id, {}, row, stamp=row.get("reported_at"))
        self.flush()

    def end_trial(self, trial_id: str, config: dict[str, Any], status: str) -> None:
        from mlflow.entities import RunTag

        run_id = self.trial_run(trial_id, config)
        self._log_new_params(trial_id, run_id, config)
        tags = [RunTag("tuner.status", status), *(RunTag(k, v) for k, v in self._feasibility_tags(trial_id).items())]
        # Its epochs, values and status in one batch; the other trials' epochs wait for their
        # own flush (at most FLUSH_S), not for this trial's end.
        self._write(trial_id, self.pending.pop(trial_id, []), tags)
        self.client.set_terminated(run_id, status="FAILED" if status == "errored" else "FINISHED")
        self.ended[trial_id] = status
        self.unsaved = True
        self._save_if_due()

    def _feasibility_tags(self, trial_id: str) -> dict[str, str]:
        """``tuner.feasible`` (true/false) and ``tuner.violated`` (the constraints it misses,
        with the values it reported) of an ended trial; none without constraints."""
        if not self.sweep.constraints:
            return {}
        rows = store.read_json_lines(records.history_file(self.folder, trial_id))
        judged = constraints.feasibility(self.sweep.parsed_constraints, rows)
        if judged.feasible:
            return {"tuner.feasible": "true"}
        return {"tuner.feasible": "false", "tuner.violated": "; ".join(judged.violated)}

    def nothing_feasible(self, reason: str) -> None:
        """The sweep ended with no trial meeting its constraints: the parent run says so, no model."""
        self.client.set_tag(self.parent_run_id, "tuner.best_trial_id", "none")
        self.client.set_tag(self.parent_run_id, NO_FEASIBLE_TAG, reason)
        self.client.set_terminated(self.parent_run_id, status="FINISHED")

    def finish(self, best: dict[str, Any], best_dir: Path, exported: Any) -> str | None:
        """Log the best metrics and model on the parent run, register it; returns the version
        (None when ``tracking.mlflow.registry`` is false, as for a --smoke run: logged only).
        ``exported``: the ExportedModel, or the ServedFiles the driver made of it (where this
        runs in the sweep's writer process).

        The model is tuner/tracking/served_model.py: uint8 images in, classes and probabilities out.
        """
        parent = self.parent_run_id
        objectives = tuple(o.metric for o in self.sweep.objectives)
        for key in dict.fromkeys(
            (self.sweep.metric, *objectives, "val_accuracy", "val_loss", "test_accuracy", "test_loss")
        ):
            if best.get(key) is not None:  # no test score for a user's data without test/
                self.client.log_metric(parent, f"best_{key}", float(best[key]))
        self.client.set_tag(parent, "tuner.best_trial_id", best["trial_id"])
        if self.sweep.constraints:  # an earlier end found no feasible trial; an extension did
            from mlflow.exceptions import MlflowException

            with contextlib.suppress(MlflowException):  # (the tag is absent: nothing to take back)
                self.client.delete_tag(parent, NO_FEASIBLE_TAG)
        for name in ("config.yaml", "metrics.json"):
            self.client.log_artifact(parent, str(best_dir / name), artifact_path="best")
        name = registered_model_name(self.sweep)
        registering = self.sweep.tracking.mlflow.registry
        chosen = {"trial_id": best["trial_id"], "epoch": best["epoch"]}
        if exported is not None and not mlflow_model.servable(exported):
            # A user's function without a model factory (or with no images to trace it on):
            # best/ holds the checkpoint, nothing MLflow could serve.
            self.client.set_terminated(parent, status="FINISHED")
            return None
        if (self.model.get("version") or not registering) and {k: self.model.get(k) for k in chosen} == chosen:
            # A resume that changed nothing (a finished sweep, say): no second version of the same model.
            self.client.set_terminated(parent, status="FINISHED")
            return self.model.get("version")

        # Two steps, each retried on its own: a retry never logs the model a second time.
        info = mlflow_store.retrying(mlflow_model.log_served_model, self.uri, parent, exported)
        if not registering:  # a smoke run's model must not pass for a version of the real one
            self.model = dict(chosen)
            self.save()
            self.client.set_terminated(parent, status="FINISHED")
            return None
        version = getattr(mlflow_store.retrying(mlflow_model.register, self.uri, info.model_uri, name), "version", None)
        if version is not None:
            for key, value in (
                ("sweep", self.folder.root.name),  # the folder: <name>, or <name>-2 for a second run
                ("trial_id", best["trial_id"]),
                ("test_accuracy", "none" if best.get("test_accuracy") is None else f"{best['test_accuracy']:.4f}"),
            ):
                self.client.set_model_version_tag(name, str(version), key, value)
            self.model = {**chosen, "version": str(version)}
            self.save()
        self.client.set_terminated(parent, status="FINISHED")
        return str(version) if version is not None else None

    def fail(self) -> None:
        self.client.set_terminated(self.parent_run_id, status="KILLED")


def log_report(folder: SweepFolder, files: list[Path], artifact_path: str) -> str | None:
    """Log a report's files (tuner/results/report.py) on the sweep's parent run; returns the run
    id, or None for a sweep that recorded no MLflow run.

    Where the run's artifacts are a local folder (the default store), the files are
    copied there as MLflow's own local artifact repository does, without importing
    MLflow or opening the store (2-3 s of a report's 5); elsewhere, through MLflow."""
    state = records.read_mlflow_state(folder)
    if not state.get("parent_run_id") or not state.get("tracking_uri"):
        return None
    database = state["tracking_uri"].removeprefix("sqlite:///")
    if state["tracking_uri"].startswith("sqlite:///") and not Path(database).is_file():
        # Moved since (mlflow.json names the store where the sweep ran): never make an empty one.
        raise TunerError(f"the sweep's MLflow store {database} is not there (see {folder.mlflow_state})")
    artifacts = _local_folder(state.get("parent_artifacts", ""))
    if artifacts is not None and artifacts.is_dir():
        for path in files:
            store.write_atomic(artifacts / artifact_path / path.name, path.read_bytes())
        return state["parent_run_id"]
    from mlflow.tracking import MlflowClient

    with mlflow_store.creating_store(state["tracking_uri"]):
        client = mlflow_store.Retrying(MlflowClient(state["tracking_uri"]))
    for path in files:
        client.log_artifact(state["parent_run_id"], str(path), artifact_path=artifact_path)
    return state["parent_run_id"]


def _local_folder(uri: str) -> Path | None:
    """The folder an artifact URI names on this machine (``file:`` or a plain path), or None."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def _as_params(values: dict[str, Any]) -> list[Any]:
    """Values as MLflow's params take them: text."""
    from mlflow.entities import Param

    return [Param(str(k), str(_plain(v))) for k, v in values.items()]


def _log_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    items = _as_params(params)
    for begin in range(0, len(items), 100):  # MLflow's batch limit
        client.log_batch(run_id, params=items[begin : begin + 100])


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value
