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
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.cluster.connect import CLUSTER_TIMEOUT_S, check_shared_storage, joined, start_ray
from tuner.data.datasets import TrainingData
from tuner.driver.progress import show
from tuner.errors import ConfigError, TunerError
from tuner.folder import remote, store
from tuner.folder.store import SweepFolder, SweepLock, release_unused, write_atomic
from tuner.spec.config import SweepConfig

if TYPE_CHECKING:
    from tuner.trial.session import TrialHooks

DRIVER_MEMORY = 64 * 1024 * 1024  # logical reservation for the trial driver process


def decide_gpu(sweep: SweepConfig, cluster: dict[str, float]) -> bool:
    if sweep.scaling.use_gpu == "auto":
        return cluster.get("GPU", 0) > 0
    if sweep.scaling.use_gpu and cluster.get("GPU", 0) <= 0:
        raise TunerError("scaling.use_gpu is true, but the Ray cluster has no GPU; use auto or false")
    return bool(sweep.scaling.use_gpu)


def stream_cpus(cluster: dict[str, float]) -> int:
    """CPUs left free of trials for a streaming sweep's Ray Data tasks (they run outside
    the trials' reservations, and a pipeline with no free CPU waits for ever): a quarter
    of the cluster's, at least one."""
    return max(1, int(cluster.get("CPU", 0) // 4))


def concurrent_trials(sweep: SweepConfig, cluster: dict[str, float], use_gpu: bool, data_cpus: int = 0) -> int:
    """How many trials fit at once: the cluster's CPUs (less ``data_cpus`` kept for a
    streaming pipeline) and GPUs over one trial's need."""
    scaling = sweep.scaling
    need_cpu = scaling.workers * scaling.cpus_per_worker
    slots = math.floor((cluster.get("CPU", 0) - data_cpus) / need_cpu + 1e-9)
    if use_gpu:
        need_gpu = scaling.workers * scaling.gpus_per_worker
        gpu_slots = math.floor(cluster.get("GPU", 0) / need_gpu + 1e-9)
        if gpu_slots < 1:
            raise TunerError(
                f"one trial needs {need_gpu:g} GPUs (scaling.workers x scaling.gpus_per_worker), "
                f"but the Ray cluster has {cluster.get('GPU', 0):g}; lower scaling.workers or gpus_per_worker"
            )
        slots = min(slots, gpu_slots)
    if slots < 1:
        raise TunerError(
            f"one trial needs {need_cpu:g} CPUs (scaling.workers x scaling.cpus_per_worker), "
            f"but the Ray cluster has {cluster.get('CPU', 0):g}"
            + (f" ({data_cpus} kept free for streaming the data)" if data_cpus else "")
            + "; lower scaling.workers or cpus_per_worker"
        )
    return min(slots, sweep.trials.max_concurrent or slots)


def describe(
    sweep: SweepConfig, slots: int, use_gpu: bool, data: Any, paths: SweepFolder, held: str = "in memory"
) -> str:
    specs = sweep.param_specs()
    searched = ", ".join(f"{k} ({s.kind})" for k, s in specs.items() if s.kind != "constant") or "nothing"
    device = "GPU" if use_gpu else "CPU"
    return "\n".join(
        [
            f"sweep {sweep.name}: {sweep.total_trials} trial(s) x up to {sweep.max_epochs} epoch(s) of "
            f"{sweep.model.name} on {sweep.data.dataset} ({len(data.train)} train / {len(data.val)} val images)",
            f"  data {held}",
            f"  search {searched}; searcher {sweep.searcher.name}, scheduler {sweep.scheduler.name}, "
            f"{sweep.mode}imise {sweep.metric}",
            f"  {slots} trial(s) at once, each {sweep.scaling.workers} worker(s) x "
            f"{sweep.scaling.cpus_per_worker:g} CPU on {device}, "
            f"{'in the trial process' if sweep.scaling.direct else 'as a TorchTrainer'}",
            f"  output: {paths.where}",
        ]
    )


def _earlier_run_note(sweep: SweepConfig, paths: SweepFolder) -> list[str]:
    """A second run of a sweep goes to a new folder; say where the first one is."""
    if paths.root.name == sweep.name:
        return []
    if paths.remote:
        earlier: str | Path = remote.join(remote.parent(paths.remote), sweep.name)
        finished = remote.exists(remote.join(str(earlier), "best", "metrics.json"))
    else:
        earlier = paths.root.with_name(sweep.name)
        finished = (earlier / "best" / "metrics.json").is_file()
    if finished:
        return [f"  ({earlier} holds an earlier, finished run of this sweep, kept as it is)"]
    return [f"  ({earlier} holds an earlier run, kept as it is; 'python -m tuner resume {earlier}' continues it)"]


def build_tuner(
    sweep: SweepConfig,
    paths: SweepFolder,
    data_ref: Any,
    use_gpu: bool,
    slots: int,
    *,
    restore: bool = False,
    reporter: Any = None,
    streamed: bool = False,
    hooks: TrialHooks | None = None,
) -> Any:
    """The ``tune.Tuner`` for a sweep, new or restored from ``paths.tune``."""
    from ray import tune

    from tuner.driver import progress
    from tuner.folder import store
    from tuner.spec import schedulers, searchers, spaces
    from tuner.tracking import mlflow_runs as tracking
    from tuner.trial.runner import TrialSetup, trial_bundles, trial_driver
    from tuner.trial.session import TrialHooks

    setup = TrialSetup(
        model_name=sweep.model.name,
        model_defaults=sweep.model.model_dump(exclude={"name"}),
        train_defaults=sweep.train.model_dump(),
        workers=sweep.scaling.workers,
        use_gpu=use_gpu,
        cpus_per_worker=sweep.scaling.cpus_per_worker,
        gpus_per_worker=sweep.scaling.gpus_per_worker,
        train_dir=paths.train_storage,
        seed=sweep.seed,
        direct=sweep.scaling.direct,
        hooks=hooks or TrialHooks(),
        augment=tuple(sweep.data.augment),
        crop_padding=sweep.data.crop_padding,
        streamed=streamed,
    )
    trainable = tune.with_resources(
        tune.with_parameters(trial_driver, setup=setup, data=[data_ref]),
        tune.PlacementGroupFactory(trial_bundles(setup, DRIVER_MEMORY), strategy="PACK"),
    )
    if restore:
        try:
            return tune.Tuner.restore(paths.tune_uri, trainable=trainable, resume_unfinished=True, resume_errored=True)
        except Exception as error:  # a truncated or foreign tuner.pkl
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            where = remote.join(paths.tune_uri, "tuner.pkl")
            raise TunerError(
                f"{where}: Tune's saved sweep cannot be restored ({type(error).__name__}: {reason})"
            ) from None
    keep = None if sweep.scheduler.name == "pbt" else sweep.checkpoint.keep  # PBT clones old checkpoints
    return tune.Tuner(
        trainable,
        param_space=spaces.to_param_space(sweep.param_specs()),
        tune_config=tune.TuneConfig(
            metric=sweep.metric,
            mode=sweep.mode,
            search_alg=searchers.build_searcher(
                sweep, slots, gpus_out_of_sight=use_gpu and not sweep.scaling.direct, cpus_kept_free=streamed
            ),
            scheduler=schedulers.build_scheduler(sweep),
            num_samples=sweep.trials.num_samples,
            time_budget_s=sweep.trials.time_budget_s,
            # A direct trial's process (torch imported, data mapped) serves the next trial.
            reuse_actors=sweep.scaling.direct,
        ),
        run_config=tune.RunConfig(
            name=paths.tune.name,
            storage_path=paths.tune_storage,
            # Every checkpoint, as far as Tune knows; the records callback prunes each ended
            # trial to its `keep` best (see store.make_records_callback for why not Tune).
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None, checkpoint_score_attribute=sweep.metric, checkpoint_score_order=sweep.mode
            ),
            failure_config=tune.FailureConfig(max_failures=sweep.trials.max_failures),
            callbacks=[
                store.make_records_callback(paths, keep, sweep.metric, sweep.mode),
                tracking.make_tensorboard_callback(),
                *([tracking.make_callback(sweep, paths)] if sweep.tracking.mlflow.enabled else []),
                *([progress.make_callback()] if reporter is not None else []),
            ],
            verbose=0 if reporter is not None else 1,  # tuner's own view, or Ray's tables (--verbose)
        ),
    )


def save_resolved_config(sweep: SweepConfig, paths: SweepFolder) -> None:
    write_atomic(paths.config, yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))


class SweepInterrupted(Exception):
    """Ctrl-C: Tune stopped the trials and saved its state; ``tuner resume`` continues."""

    def __init__(self, folder: Path | str):
        super().__init__(f"interrupted; the sweep's state is saved in {folder}")
        self.folder = folder


@contextlib.contextmanager
def _stop_cleanly_on_ctrl_c():
    """First Ctrl-C (or SIGTERM, as ``tuner stop`` and ``ray job stop`` send): ask Tune to
    stop and save (Tune listens to SIGUSR1); a second Ctrl-C aborts.

    Tune's own SIGINT handler would do the same but tell us nothing; this way the
    caller knows the sweep did not finish.
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def on_signal(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            return
        interrupted.set()
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        show(f"\n{what}: stopping the trials and saving the sweep's state (Ctrl-C again to abort)")
        # Tune's own words from here on (Tuner.restore advice, no metrics for the trials
        # that never started) mislead: tuner's last line says how to resume.
        for logger in quieted:
            logger.setLevel(logging.ERROR)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGUSR1)

    loggers = [logging.getLogger(name) for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis")]
    quieted = {logger: logger.level for logger in loggers}
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for logger, level in quieted.items():
            logger.setLevel(level)


def can_resume(paths: SweepFolder) -> bool:
    from ray import tune

    if paths.remote:
        return remote.exists(paths.tune_uri) and tune.Tuner.can_restore(paths.tune_uri)
    return paths.tune.is_dir() and tune.Tuner.can_restore(str(paths.tune))


@dataclass
class SweepOutcome:
    paths: SweepFolder
    results: Any  # ray.tune.ResultGrid
    best: dict[str, Any]  # best/metrics.json


def run_sweep(
    sweep: SweepConfig,
    *,
    address: str | None = None,
    verbose: bool = False,
    paths: SweepFolder | None = None,
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S,
    hooks: TrialHooks | None = None,
) -> SweepOutcome:
    """Run a sweep in a folder of its own and export its best model; with ``paths``,
    resume the sweep in that folder instead. ``hooks``: tests' seams in every trial.

    A new sweep never writes into an existing folder: it claims ``<name>``, else
    ``<name>-2``, ... The folder is locked for as long as this process writes to it.
    """
    resume = paths is not None
    if paths is None:
        if sweep.tracking.mlflow.enabled:
            from tuner.tracking.mlflow_runs import tracking_uri

            tracking_uri(sweep)  # an output_dir URI needs an MLflow store of its own: refused here
        data = _load_data(sweep)  # a missing data set is refused before a folder is made
        paths = _claim(sweep)
    mirror = None
    try:
        with SweepLock(paths), remote.mirrored(paths.root, paths.remote) as mirror:
            if resume:
                _check_resumable(sweep, paths)  # before any work: a folder in use or corrupt is refused
                data = _load_data(sweep)
            else:
                save_resolved_config(sweep, paths)
            return _fit_and_export(
                sweep,
                paths,
                data,
                address=address,
                verbose=verbose,
                resume=resume,
                cluster_timeout_s=cluster_timeout_s,
                hooks=hooks,
            )
    except BaseException:
        if not resume:
            release_unused(paths)  # only if nothing but its config was written
            if paths.remote:
                remote.release_unused(paths.remote)
        raise
    finally:
        if paths.remote and (mirror is None or mirror.pushed_all):
            # The URI holds everything; the caller still reads best/ here. (Else keep it:
            # the error names it.)
            atexit.register(remote.discard, paths.root)


def _claim(sweep: SweepConfig) -> SweepFolder:
    return SweepFolder.claim(sweep.output_dir, sweep.name)


def _load_data(sweep: SweepConfig) -> Any:
    """A built-in set, read; a user's own files, listed and checked (decoded once Ray runs).
    An error about the data section names the sweep file and line, as validation's do."""
    from tuner.data.datasets import plan_data

    try:
        return plan_data(sweep.data, seed=sweep.seed)
    except ConfigError as error:
        raise sweep.locate(error) from None


def _smallest_object_store() -> float:
    """The smallest alive node's object store: the one copy of an in-memory set must fit
    on any node a trial lands on."""
    import ray

    stores = [node["Resources"].get("object_store_memory", 0) for node in ray.nodes() if node["Alive"]]
    return min(stores) if stores else 0.0


def _ready_data(sweep: SweepConfig, planned: Any, paths: SweepFolder, resume: bool, verbose: bool) -> tuple[Any, str]:
    """The data trials read, and how (the plan line's words): in memory, decoded or from
    the cache, or streamed when the decoded set would not fit. A resumed sweep keeps the
    way its first run chose (its searcher, restored by Tune, keeps that run's cap)."""
    from tuner.data.datasets import OwnData

    if not isinstance(planned, OwnData):
        return planned, "in memory"
    from tuner.data import sources
    sources.quiet_ray_data(verbose)
    earlier = store.read_data_description(paths) if resume else None
    store_bytes = _smallest_object_store()
    size = f"{planned.decoded_bytes / 2**20:,.0f} MiB decoded"
    share = f"{sweep.data.object_store_share:g} of the {store_bytes / 2**20:,.0f} MiB object store"
    started = time.perf_counter()
    held = None if earlier is None else earlier.get("held") == "stream"
    data, decoder = planned.ready(object_store_bytes=store_bytes, stream=held)
    if isinstance(data, TrainingData):
        data = dataclasses.replace(data, test=None)  # trials never read it; the export reads it itself
    if not resume or earlier is None:  # written by _run once the sweep is built
        planned.record = {
            "data": planned.describe((data.mean, data.std)),
            "held": "memory" if isinstance(data, TrainingData) else "stream",
        }
    if not isinstance(data, TrainingData):
        why = (
            "as its first run"
            if held is not None
            else ("data.streaming: true" if sweep.data.streaming is True else f"{size} > {share}")
        )
        return data, f"streamed with Ray Data ({why})"
    took = time.perf_counter() - started
    how = {"cache": "from the cache", "ray_data": f"decoded with Ray Data in {took:.1f} s"}.get(
        decoder, f"decoded in this process in {took:.1f} s"
    )
    return data, f"in memory ({size}, {how})"


def _check_resumable(sweep: SweepConfig, paths: SweepFolder) -> None:
    """Every record resume builds on reads back; else one line naming the file. (Tune,
    given a state it cannot load, would start the sweep again from scratch.)"""
    from tuner.results.summaries import analysis

    store.read_mlflow_state(paths)
    store.trial_histories(paths)
    for state in store.recover_state(paths):
        show(f"{state}: was cut short (a full disk?); put back tuner's last whole copy of it")
    if not can_resume(paths):
        raise TunerError(f"{paths.where}: no Tune experiment state to resume in {paths.tune_uri}")
    analysis(sweep, paths)


def _fit_and_export(
    sweep: SweepConfig,
    paths: SweepFolder,
    data: Any,
    *,
    address: str | None,
    verbose: bool,
    resume: bool,
    cluster_timeout_s: float,
    hooks: TrialHooks | None,
) -> SweepOutcome:
    """Start or join Ray, fit, export; a write the machine refused ends it in one line."""
    import ray

    store.FAILED_WRITES.clear()
    started_ray = start_ray(address, verbose=verbose)
    try:
        with store.writing_records_to(paths):
            return _run(
                sweep,
                paths,
                data,
                resume=resume,
                verbose=verbose,
                cluster_timeout_s=cluster_timeout_s,
                address=address,
                hooks=hooks,
            )
    except Exception as error:
        failure = store.failed_write(error, paths.root)
        if failure is None:
            raise
        raise store.StorageError(
            f"{failure}; the sweep stopped: free space (or make the folder writable), then continue it with: "
            f"python -m tuner resume {paths.where}"
        ) from None
    finally:
        if started_ray:
            ray.shutdown()


@contextlib.contextmanager
def _ray_output(verbose: bool) -> Iterator[None]:
    """Tune's own output only with --verbose. Its new output engine prints a config box
    and a TensorBoard hint (a temporary folder) even at verbose=0; the legacy engine, at
    verbosity 0, prints nothing. RAY_AIR_NEW_OUTPUT is read when fit() starts."""
    if verbose:
        yield
        return
    before = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = before


def _reporter(sweep: SweepConfig, paths: SweepFolder) -> Any:
    """The progress view (tuner/driver/progress.py), seeded with a resumed sweep's best so far."""
    from tuner.driver.progress import Progress, Reporter

    searched = [name for name, spec in sweep.param_specs().items() if spec.kind != "constant"]
    progress = Progress(sweep.name, sweep.metric, sweep.mode, sweep.total_trials, sweep.max_epochs, searched)
    best = store.best_epoch(store.trial_histories(paths), sweep.metric, sweep.mode)
    if best is not None:
        progress.seed(best)
    return Reporter(progress)


def _run(
    sweep: SweepConfig,
    paths: SweepFolder,
    data: Any,
    *,
    resume: bool,
    verbose: bool = False,
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S,
    address: str | None = None,
    hooks: TrialHooks | None = None,
) -> SweepOutcome:
    import ray

    from tuner.results import export
    from tuner.tracking import mlflow_runs as tracking
    check_shared_storage(paths, cluster_timeout_s)
    cluster = ray.cluster_resources()
    use_gpu = decide_gpu(sweep, cluster)
    planned = data
    data, held = _ready_data(sweep, planned, paths, resume, verbose)
    streamed = not isinstance(data, TrainingData)
    data_cpus = stream_cpus(cluster) if streamed else 0
    if streamed and sweep.scheduler.name in ("hyperband", "bohb"):
        raise TunerError(
            f"scheduler.name: {sweep.scheduler.name!r} pauses trials and waits for a full bracket, which the cap on "
            f"concurrent trials that streaming needs ({data_cpus} CPU(s) kept free for Ray Data) would starve; "
            "use asha, median, pbt or fifo, or data.streaming: false"
        )
    slots = concurrent_trials(sweep, cluster, use_gpu, data_cpus=data_cpus)
    if data_cpus:
        held += f"; {data_cpus} CPU(s) kept free of trials for its tasks"
    # A reader gone away (``| head``) does not stop the sweep: show() goes quiet instead.
    show(describe(sweep, slots, use_gpu, data, paths, held))
    for line in [] if resume else _earlier_run_note(sweep, paths):
        show(line)
    data_ref = ray.put(data)
    reporter = _reporter(sweep, paths)
    tuner = build_tuner(
        sweep,
        paths,
        data_ref,
        use_gpu,
        slots,
        restore=resume,
        reporter=None if verbose else reporter,
        streamed=streamed,
        hooks=hooks,
    )
    # The report's slot count; only once the sweep (or its restore) is built: a refused
    # resume writes nothing.
    store.append_timeline(store.current(paths), "", "run", slots=slots, resume=resume, **joined(address))
    if getattr(planned, "record", None):  # a user's own data: what the export and a resume build on
        store.write_data_description(store.current(paths), planned.record)
    with (
        _stop_cleanly_on_ctrl_c() as interrupted,
        reporter if not verbose else contextlib.nullcontext(),
        _ray_output(verbose),
    ):
        results = tuner.fit()
    del data_ref
    for error in results.errors:  # a trial that could not write its checkpoint: a full disk
        if store.failed_write(error, paths.root) is not None:
            raise error
    if interrupted.is_set():
        if sweep.tracking.mlflow.enabled:
            tracking.SweepRecord(sweep, paths).fail()
        raise SweepInterrupted(paths.where)
    exported = export.export_best(sweep, paths, results, to=paths.best, overwrite=True)
    if sweep.tracking.mlflow.enabled:
        record = tracking.SweepRecord(sweep, paths)
        version = record.finish(exported.metrics, paths.best, exported)
        if version is not None:  # None: not registered (tracking.mlflow.registry: false)
            exported.metrics["model_version"] = version
    return SweepOutcome(paths, results, exported.metrics)
