"""Run a validated sweep: start (or join) Ray, build the Tune objects, fit, export.

Everything a sweep writes lives in its own folder, ``<output_dir>/<name>/`` (or
``<name>-2``, ... when that one is taken), owned by tuner/folder/store.py::

    sweep.yaml   the resolved config        tune/   Tune state, one folder per trial
    history/     every epoch, per trial      best/   the exported best model
    train/       Ray Train runs' storage     lock    held by the process writing it

``output_dir`` may also be a storage URI (``s3://...``): see tuner/folder/remote.py.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.ahead import import_ahead
from tuner.cluster import warm as warm_ray
from tuner.cluster.connect import CLUSTER_TIMEOUT_S, check_shared_storage, joined, start_ray, stop_ray
from tuner.data.datasets import TrainingData
from tuner.driver import own_code
from tuner.driver.build import build_tuner
from tuner.driver.inputs import check_model, load_data, ready_data
from tuner.driver.plan import concurrent_trials, decide_gpu, describe, earlier_run_note, stream_cpus
from tuner.driver.progress import show
from tuner.driver.run import Mode, Run
from tuner.driver.signals import SweepInterrupted, ray_output, stop_cleanly_on_ctrl_c
from tuner.driver.tune_start import a_second_of_its_own, ray_session_dir
from tuner.driver.warm_start import earlier_trials
from tuner.errors import NoFeasibleTrial, TunerError
from tuner.folder import records, remote, store
from tuner.folder.store import SweepFolder, SweepLock, release_unused, write_atomic
from tuner.invocation import tuner_command
from tuner.search.registry import SCHEDULERS
from tuner.sweepfile.schema import SweepConfig
from tuner.tracking import mlflow_model
from tuner.tracking import writer as mlflow_writer

if TYPE_CHECKING:
    from tuner.trial.session import TrialHooks


def save_resolved_config(sweep: SweepConfig, folder: SweepFolder) -> None:
    """``sweep.yaml``: every value the sweep ran with; for a user's function or command,
    without the sections it did not give (no data section means no data for it)."""
    unset: dict[str, Any] = {}
    if sweep.own_loop:  # train.epochs only: the rest is tuner's loop's
        unset = {name: True for name in ("data", "model") if name not in sweep.model_fields_set}
        unset["train"] = set(type(sweep.train).model_fields) - {"epochs"}
    write_atomic(folder.config, yaml.safe_dump(sweep.model_dump(mode="json", exclude=unset), sort_keys=False))


def can_resume(folder: SweepFolder) -> bool:
    from ray import tune

    if folder.remote:
        return remote.exists(folder.tune_uri) and tune.Tuner.can_restore(folder.tune_uri)
    return folder.tune.is_dir() and tune.Tuner.can_restore(str(folder.tune))


@dataclass
class SweepOutcome:
    folder: SweepFolder
    results: Any  # ray.tune.ResultGrid; None for a finished sweep resumed (nothing ran)
    best: dict[str, Any]  # best/metrics.json


def run_sweep(
    sweep: SweepConfig,
    *,
    address: str | None = None,
    verbose: bool = False,
    folder: SweepFolder | None = None,
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S,
    hooks: TrialHooks | None = None,
    extension: SweepConfig | None = None,
    function: Any = None,
) -> SweepOutcome:
    """Run a sweep in a folder of its own and export its best model; with ``folder``,
    resume the sweep in that folder instead. ``hooks``: tests' seams in every trial.
    ``extension`` (tuner/driver/extend.py): run ``sweep``'s trials as a new Tune experiment
    in ``folder`` (its next part), ``extension`` being the whole sweep to record in sweep.yaml.
    ``function``: the sweep's trainable or objective as a function object (tuner.run from a
    notebook), which its reference in the file only names.

    A new sweep never writes into an existing folder: it claims ``<name>``, else
    ``<name>-2``, ... The folder is locked for as long as this process writes to it.
    """
    mode: Mode = "new" if folder is None else "resume" if extension is None else "extend"
    evaluated = code = data = None
    if folder is None:
        if sweep.tracking.mlflow.enabled:
            from tuner.tracking.mlflow_runs import tracking_uri

            tracking_uri(sweep)  # an output_dir URI needs an MLflow store of its own: refused here
        data = load_data(sweep)  # a missing data set is refused before a folder is made
        check_model(sweep, data)
        evaluated = earlier_trials(sweep)  # searcher.warm_start
        code = own_code.take(sweep)
        folder = _claim(sweep)
    mirror = None
    try:
        with SweepLock(folder), remote.mirrored(folder.root, folder.remote) as mirror:
            if mode == "resume":
                _check_resumable(sweep, folder)  # before any work: a folder in use or corrupt is refused
                finished = _finished(sweep, folder)
                if finished is not None:  # nothing to resume: said without starting Ray
                    return finished
                data = load_data(sweep)
                code = own_code.kept(sweep, folder)  # the code the sweep began with
            elif mode == "extend":
                _check_extendable(sweep, folder)
                data = load_data(sweep)
                code = own_code.kept(sweep, folder)
                save_resolved_config(extension, folder)  # every trial, the new ones too
            else:
                save_resolved_config(sweep, folder)
                own_code.keep(code, folder)
            if function is None:
                own_code.check_importable(sweep)  # not a notebook's function, which only tuner.run can give again
            run = Run(
                sweep,
                folder,
                mode,
                data,
                code,
                hooks,
                evaluated,
                address=address,
                verbose=verbose,
                cluster_timeout_s=cluster_timeout_s,
                function=function,
            )
            return _fit_and_export(run)
    except BaseException:
        if mode == "new":
            release_unused(folder)  # only if nothing but its config was written
            if folder.remote:
                remote.release_unused(folder.remote)
        raise
    finally:
        if folder.remote and (mirror is None or mirror.pushed_all):
            # The URI holds everything; the caller still reads best/ here. (Else keep it:
            # the error names it.)
            atexit.register(remote.discard, folder.root)


def _claim(sweep: SweepConfig) -> SweepFolder:
    return SweepFolder.claim(sweep.output_dir, sweep.name)


def _check_extendable(sweep: SweepConfig, folder: SweepFolder) -> None:
    """Every trial so far ended (under the folder's lock, held by the caller)."""
    from tuner.results.summaries import trial_summaries

    earlier = dataclasses.replace(folder, part=folder.part - 1)
    undone = [t for t in trial_summaries(sweep, earlier) if t.status in ("interrupted", "pending", "paused", "running")]
    if undone:
        raise TunerError(
            f"{folder.where}: {len(undone)} trial(s) have not ended ({undone[0].trial_id}: {undone[0].status}); "
            f"finish the sweep first with: {tuner_command()} resume {folder.where}"
        )
    exported = (earlier.best / "metrics.json").is_file()
    if not exported and not sweep.nothing_feasible(records.trial_histories(folder)):  # none feasible: more may be
        raise TunerError(f"{folder.where}: the sweep has not exported its best model yet; resume it before extending")


def _finished(sweep: SweepConfig, folder: SweepFolder) -> SweepOutcome | None:
    """A sweep whose every trial ended (none errored: resume retries those) and whose best
    model is exported: its outcome as it stands, and a line saying so; else None."""
    from tuner.results.summaries import trial_summaries

    summaries = trial_summaries(sweep, folder)
    exported = folder.best / "metrics.json"
    ended = all(t.status in ("finished", "stopped_early") for t in summaries)
    if not (ended and len(summaries) >= sweep.total_trials and exported.is_file()):
        return None
    if sweep.tracking.mlflow.enabled and records.mlflow_behind(folder):
        return None  # MLflow lacks records the history holds: resume writes them
    if not _tune_state_reads(folder):
        return None  # the resume's own path names what is wrong with it
    show(
        f"{folder.where}: the sweep has finished ({len(summaries)} trial(s) ended); nothing to resume. "
        f"More trials: {tuner_command()} extend {folder.where} --trials N"
    )
    return SweepOutcome(folder, None, store.read_json(exported, what="export's metrics.json"))


def _tune_state_reads(folder: SweepFolder) -> bool:
    """Whether Tune's pickled sweep (``tune/tuner.pkl``) reads back, without starting Ray."""
    import cloudpickle

    try:
        cloudpickle.loads(folder.read_tune_file("tuner.pkl"))
    except ModuleNotFoundError:  # whole, naming an earlier tuner's modules (driver/earlier.py maps them)
        return True
    except Exception:  # truncated or foreign
        return False
    return True


def _check_resumable(sweep: SweepConfig, folder: SweepFolder) -> None:
    """Every record resume builds on reads back; else one line naming the file. (Tune,
    given a state it cannot load, would start the sweep again from scratch.)"""
    from tuner.results.summaries import analysis

    records.read_mlflow_state(folder)
    records.trial_histories(folder)
    for state in records.recover_state(folder):
        show(f"{state}: was cut short (a full disk?); put back tuner's last whole copy of it")
    if not can_resume(folder):
        raise TunerError(f"{folder.where}: no Tune experiment state to resume in {folder.tune_uri}")
    analysis(sweep, folder)


def _fit_and_export(run: Run) -> SweepOutcome:
    """Start or join Ray, fit, export; a write the machine refused ends it in one line."""
    import ray

    warm = None if run.address or os.environ.get("RAY_ADDRESS") or ray.is_initialized() else warm_ray.current()
    with warm_ray.lease() if warm else contextlib.nullcontext():  # the warm Ray stays up while this runs
        run.warm = warm.address if warm else None
        import_ahead("torch")  # the export's, while ray.init waits for Ray's processes (1.3 s of its 3-4 s)
        if run.sweep.tracking.mlflow.enabled:
            mlflow_writer.start_ahead(run.sweep)  # a writer process's imports while Ray starts
        try:
            started_ray = start_ray(run.warm or run.address, verbose=run.verbose)
            try:
                return _fit_and_export_on_ray(run)
            finally:
                if started_ray:
                    stop_ray()
        finally:
            mlflow_writer.drop_ahead()  # one no sweep took (refused before its trials)


def _fit_and_export_on_ray(run: Run) -> SweepOutcome:
    folder = run.folder
    with store.noting_failed_writes():
        try:
            with store.writing_records_to(folder), mlflow_writer.held_open():
                return _run(run)
        except Exception as error:
            failure = store.failed_write(error, folder.root)
            if failure is None:
                raise
            raise store.StorageError(
                f"{failure}; the sweep stopped: free space (or make the folder writable), then continue it "
                f"with: {tuner_command()} resume {folder.where}"
            ) from None


def _records_elsewhere(sweep: SweepConfig, folder: SweepFolder) -> str | None:
    """A line for a resumed folder whose MLflow records go on where the sweep began, when that
    is not where a sweep in this folder would write them (the folder was copied or moved)."""
    from tuner.tracking.mlflow_runs import tracking_uri

    state = records.read_mlflow_state(folder)
    uri, began = state.get("tracking_uri"), state.get("folder")
    if not uri or (uri == tracking_uri(sweep) and began in (None, folder.where)):
        return None
    where = f"; it began in {began}" if began and began != folder.where else ""
    return f"  MLflow: its records go on in the runs it began with, in {uri}{where}"


def _reporter(sweep: SweepConfig, folder: SweepFolder) -> Any:
    """The progress view (tuner/driver/progress.py), seeded with a resumed sweep's best so far."""
    from tuner.driver.progress import Progress, Reporter

    searched = [name for name, spec in sweep.flat_specs().items() if spec.kind != "constant"]
    if sweep.objective is not None:  # its space is its trial.suggest_* calls: all a trial was given
        searched = None
    progress = Progress(
        sweep.name,
        sweep.metric,
        sweep.mode,
        sweep.total_trials,
        sweep.max_epochs,
        searched,
        constraints=sweep.parsed_constraints,
    )
    best = sweep.best_epoch(records.trial_histories(folder))
    if best is not None:
        progress.seed(best)
    return Reporter(progress)


def _run(run: Run) -> SweepOutcome:
    sweep, folder, resume, verbose = run.sweep, run.folder, run.resume, run.verbose
    import ray

    check_shared_storage(folder, run.cluster_timeout_s)
    cluster = ray.cluster_resources()
    use_gpu = decide_gpu(sweep, cluster)
    planned = run.data
    data, held = ready_data(sweep, planned, folder, resume, verbose) if planned is not None else (None, "")
    streamed = data is not None and not isinstance(data, TrainingData)
    data_cpus = stream_cpus(cluster) if streamed else 0
    if streamed and sweep.scheduler.pauses_trials:
        others = ", ".join(name for name, kind in SCHEDULERS.items() if not kind.pauses_trials)
        raise TunerError(
            f"scheduler.name: {sweep.scheduler.name!r} pauses trials and waits for a full bracket, which the cap on "
            f"concurrent trials that streaming needs ({data_cpus} CPU(s) kept free for Ray Data) would starve; "
            f"use one of {others}, or data.streaming: false"
        )
    spark_cpus = getattr(planned, "kept_cpus", 0)  # a kept Spark session's executors hold these
    slots = concurrent_trials(sweep, cluster, use_gpu, data_cpus=data_cpus + spark_cpus)
    if data_cpus:
        held += f"; {data_cpus} CPU(s) kept free of trials for its tasks"
    # A reader gone away (``| head``) does not stop the sweep: show() goes quiet instead.
    show(describe(sweep, slots, use_gpu, data, folder, held))
    if run.warm:
        show(f"  Ray: the warm local Ray at {run.warm} (tuner ray down stops it)")
    if run.mode == "extend":
        show(
            f"  extend: {sweep.total_trials} more trial(s) in {folder.tune.name}/, the searcher going on from "
            f"{folder.parts()[-2].tune.name}/"
        )
    for line in earlier_run_note(sweep, folder) if run.mode == "new" else []:
        show(line)
    if resume and sweep.tracking.mlflow.enabled and (elsewhere := _records_elsewhere(sweep, folder)):
        show(elsewhere)
    data_ref = ray.put(data) if data is not None else None
    reporter = _reporter(sweep, folder)
    tuner = build_tuner(run, data_ref, use_gpu, slots, streamed=streamed, reporter=None if verbose else reporter)
    # The report's slot count; only once the sweep (or its restore) is built: a refused
    # resume writes nothing.
    records.append_timeline(store.current(folder), "", "run", slots=slots, resume=resume, **joined(run.address))
    if getattr(planned, "record", None):  # a user's own data: what the export and a resume build on
        records.write_data_description(store.current(folder), planned.record)
    with (
        stop_cleanly_on_ctrl_c() as interrupted,
        reporter if not verbose else contextlib.nullcontext(),
        ray_output(verbose),
        a_second_of_its_own(ray_session_dir()),  # until Tune has made its experiment (SweepRecords.setup)
    ):
        results = tuner.fit()
    del data_ref
    for error in results.errors:  # a trial that could not write its checkpoint: a full disk
        if store.failed_write(error, folder.root) is not None:
            raise error
    if interrupted.is_set():
        if sweep.tracking.mlflow.enabled:
            _last_write(run, "fail")
        raise SweepInterrupted(folder.where)
    try:
        return _export_and_register(run, results)
    except KeyboardInterrupt:  # the trials are done and recorded: resume exports what is left
        raise SweepInterrupted(folder.where) from None


def _export_and_register(run: Run, results: Any) -> SweepOutcome:
    """The best trial's model exported to best/ and logged (and registered) in MLflow."""
    from tuner.results.export_own import exporter

    sweep, folder = run.sweep, run.folder
    every = list(results)
    if folder.part > 1:  # an extended sweep: the best over every part's trials
        from tuner.results.summaries import all_results

        every = [*all_results(sweep, dataclasses.replace(folder, part=folder.part - 1)), *results]
    try:
        exported = exporter(sweep)(sweep, folder, every, to=folder.best, overwrite=True)
    except NoFeasibleTrial as error:  # the trials are recorded; there is no best to export or register
        if sweep.tracking.mlflow.enabled:
            _last_write(run, "nothing_feasible", str(error).removeprefix(f"{folder.where}: "))
        raise
    if sweep.tracking.mlflow.enabled:
        with tempfile.TemporaryDirectory(prefix="tuner-model-") as files:
            served = mlflow_model.served_files(exported, Path(files))  # traced here, where the model is
            written, version = _last_write(run, "finish", exported.metrics, folder.best, served)
        if written and version is not None:  # None: not registered (tracking.mlflow.registry: false)
            exported.metrics["model_version"] = version
    if sweep.tracking.mlflow.enabled and (behind := records.mlflow_behind(folder)):
        show(
            f"  {behind}: the best model is exported here, not logged there; once it is back, "
            f"{tuner_command()} resume {folder.where} writes every record the history holds"
        )
        exported.metrics["mlflow_behind"] = True
    return SweepOutcome(folder, results, exported.metrics)


def _last_write(run: Run, method: str, *args: Any) -> tuple[bool, Any]:
    """One of the sweep record's last writes (``finish``, ``fail``, ``nothing_feasible``):
    made by the sweep's writer where Tune's end left it open (its store open, MLflow
    imported), else here. (False, None) where MLflow is behind (noted in the folder)."""
    from tuner.tracking import mlflow_runs as tracking

    held = mlflow_writer.take_held()
    if held is not None:
        try:
            return held.ask(method, *args)
        finally:
            held.close()
    if not records.mlflow_behind(run.folder):
        with _unless_mlflow_is_away(run.folder):
            return True, getattr(tracking.SweepRecord(run.sweep, run.folder), method)(*args)
    return False, None


@contextlib.contextmanager
def _unless_mlflow_is_away(folder: SweepFolder) -> Iterator[None]:
    """A tracking server that does not answer at the sweep's end is noted (``resume`` writes
    its records later), not an error: the sweep's outcome is in its folder."""
    from tuner.tracking.mlflow_outage import unreachable

    try:
        yield
    except Exception as error:
        if (why := unreachable(error)) is None:
            raise
        records.note_mlflow_behind(folder, f"MLflow was unreachable at the sweep's end ({why})")
