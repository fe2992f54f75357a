"""What runs inside a trial.

``trial_driver`` is the Tune function trainable. It runs one training loop,
``run_training``, in one of two ways:

- **direct** (one worker): the loop runs in the Tune trial's own process, reporting
  to Tune itself. No TorchTrainer, so a trial starts in about a second instead of 10-20.
- **torch_trainer** (any number of workers): it builds a Ray Train ``TorchTrainer``
  (DDP; gloo on CPU, NCCL on GPU) and relays each epoch's metrics and checkpoint from
  Train's rank 0 back to Tune.

Either way Tune holds real checkpoints (PBT exploits, HyperBand pause/resume, retries
and the best export all need them; see docs/ray-notes.md), and the loop, its metrics and
its checkpoints are the same (tuner/trial/loop.py): only the ``Session`` (rank, device,
resume, report) differs.

Nothing here reads YAML: the driver receives the sampled hyperparameters and a
``TrialSetup`` of plain values.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.folder import EARLIER_EPOCHS, HELD_S, OWN_CHECKPOINT
from tuner.trial.own import OwnLoop, run_own
from tuner.trial.session import (
    RANKS_DIR,
    LoopSettings,
    Session,
    TrialHooks,
    latest_own_checkpoint,
    load_state,
    note_rank,
    touch_alive,
    write_own_checkpoint,
)
from tuner.usercode.snapshot import CodeSnapshot, put_first_on_path

if TYPE_CHECKING:
    import torch
    from torch import nn

# torch is imported where a trial trains (tuner's loop, a device asked for), not with this
# module: a trial of a user's function that never uses torch starts without its 3-4 s import.

_FIT_DONE = "__tuner_fit_done__"
# A trial that keeps its own checkpoints sends Tune at least one report this often (and every
# epoch the scheduler acts at, its first and its last); the epochs between travel with the next one sent.
# A report is a round trip through Tune's loop (5-8 ms on 2 cores) that the trial waits for:
# a third of a 0.05 s epoch, nothing to a 10 s one, which is sent at once as before.
REPORT_EVERY_S = 0.25


@dataclass(frozen=True)
class TrialSetup:
    """Fixed settings shared by every trial of a sweep (plain values, picklable)."""

    model_name: str
    model_defaults: dict[str, Any]  # the model section minus ``name``
    train_defaults: dict[str, Any]  # the train section
    workers: int
    use_gpu: bool
    cpus_per_worker: float
    gpus_per_worker: float
    train_dir: str  # storage for the Train runs, inside the sweep folder
    seed: int
    direct: bool = False  # run the loop in the trial's process (workers == 1)
    hooks: TrialHooks = field(default_factory=TrialHooks)  # tests' seams (tuner/trial/testing.py)
    augment: tuple[str, ...] = ()  # data.augment (a trial may sample its own)
    crop_padding: int = 4
    streamed: bool = False  # the data stream from a Ray Data pipeline (tuner.data.datasets.StreamingData)
    own: OwnLoop | None = None  # the user's training function or command runs instead of the loop
    code: CodeSnapshot | None = None  # the user's code folder, shipped to every trial
    trials_dir: str | None = None  # the sweep's tune/ folder, where every node sees it (None at a URI)
    # a direct trial under a scheduler that never moves one: it writes its checkpoints into its
    # folder and tells Tune only its metrics (see _TuneSession.report); else Tune keeps them
    own_checkpoints: bool = False
    # the epochs Tune must have as the trial reports them, where it keeps its own checkpoints
    # (the scheduler's, the last; Scheduler.acts_at); None: every report is sent at once
    sends_at: frozenset[int] | None = None
    measure_latency: bool = False  # latency_ms is an objective or constrained: time inference after each epoch
    # trials.stall_timeout_s as a number: also how long a DDP rank waits in a collective
    # (torch.distributed's timeout) before it raises; None: Ray Train's own (30 min)
    collective_timeout_s: float | None = None

    @classmethod
    def of(
        cls,
        sweep: Any,
        *,
        use_gpu: bool = False,
        train_dir: str = "",
        study: str | None = None,
        function: Any = None,
        **run: Any,
    ) -> TrialSetup:
        """The settings a sweep file gives every trial (``sweep``: a SweepConfig); ``run``: what
        the run adds (hooks, streamed, code, trials_dir); ``study``: the name of an objective's
        study keeper (tuner/search/define_by_run.py); ``function``: the trainable or objective
        as a function object (sent by value). The one place a setting the trial reads
        goes from the file to the trial."""
        own = None
        if sweep.own_loop:
            own = OwnLoop(
                trainable=sweep.trainable,
                command=tuple(sweep.command) if sweep.command else None,
                metric=sweep.metric,
                max_epochs=sweep.train.epochs,
                uses_data=sweep.uses_data,
                metric_pattern=_patterns(sweep.metric_pattern),
                objective=sweep.objective,
                study=study,
                function=function,
            )
        stall = sweep.trials.stall_timeout_s
        moves_trials = sweep.scheduler.pauses_trials or sweep.scheduler.clones_checkpoints
        own_checkpoints = sweep.scaling.direct and not moves_trials and run.get("trials_dir") is not None
        acts_at = sweep.scheduler.acts_at(sweep) if own_checkpoints else None
        return cls(
            model_name=sweep.model.name,
            model_defaults=sweep.model.model_dump(exclude={"name"}),
            train_defaults=sweep.train.model_dump(),
            workers=sweep.scaling.workers,
            use_gpu=use_gpu,
            cpus_per_worker=sweep.scaling.cpus_per_worker,
            gpus_per_worker=sweep.scaling.gpus_per_worker,
            train_dir=train_dir,
            seed=sweep.seed,
            direct=sweep.scaling.direct,
            augment=tuple(sweep.data.augment),
            crop_padding=sweep.data.crop_padding,
            own=own,
            measure_latency="latency_ms"
            in (sweep.metric, *(o.metric for o in sweep.objectives), *(c.metric for c in sweep.parsed_constraints)),
            collective_timeout_s=stall if isinstance(stall, (int, float)) else None,
            own_checkpoints=own_checkpoints,
            sends_at=None if acts_at is None else acts_at | {sweep.max_epochs},
            **run,
        )


def _patterns(given: str | list[str] | None) -> tuple[str, ...]:
    return (given,) if isinstance(given, str) else tuple(given or ())


# A trial's CPUs are reserved by Tune, one bundle per worker in the trial's placement
# group, so that Tune's own scheduling decides how many trials run (and HyperBand can
# pause some while others run). The driver runs in bundle 0; each Train worker asks a
# token share of CPU, pinned to its bundle's node, so a trial spans nodes exactly as its
# bundles do. (A Train run killed while its workers are still being placed can leave its
# own placement group behind - docs/ray-notes.md - and a token's worth is harmless.)
# GPUs are reserved by Train's workers themselves, out of Tune's sight: the sweep caps
# the trials it starts at the cluster's GPU slots (tuner.search.registry).
WORKER_CPU_TOKEN = 0.01


def trial_bundles(setup: TrialSetup, memory: int) -> list[dict[str, float]]:
    """The bundles of the placement group Tune reserves for a trial; bundle 0 holds its driver."""
    if setup.direct:  # the trial process is the worker
        gpu = {"GPU": setup.gpus_per_worker} if setup.use_gpu else {}
        return [{"CPU": setup.cpus_per_worker, **gpu, "memory": memory}]
    share = {"CPU": setup.cpus_per_worker - WORKER_CPU_TOKEN}
    return [{**share, "memory": memory}] + [dict(share) for _ in range(setup.workers - 1)]


def worker_resources(setup: TrialSetup) -> dict[str, float]:
    resources = {"CPU": WORKER_CPU_TOKEN}
    if setup.use_gpu:
        resources["GPU"] = setup.gpus_per_worker
    return resources


def worker_nodes(setup: TrialSetup) -> list[dict[str, str]] | None:
    """Per-worker label selectors: each CPU worker on the node of its bundle of the trial's
    placement group (GPU workers go where Train finds their GPUs)."""
    import ray
    from ray.util.placement_group import NODE_ID_LABEL_KEY

    group = ray.util.get_current_placement_group()
    if setup.use_gpu or group is None:
        return None
    nodes = ray.util.placement_group_table(group)["bundles_to_node_id"]
    return [{NODE_ID_LABEL_KEY: nodes[index]} for index in range(setup.workers)]


def resolve_hyperparameters(setup: TrialSetup, sampled: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Defaults overlaid with the sampled values, coerced by the config schema.

    Coercion turns Tune's ``128.0`` from quniform into the int a layer width needs,
    and BOHB's ``np.str_`` into ``str``.
    """
    from tuner.sweepfile.sections import MODEL_CHOICE, CnnConfig, ResNetConfig, SyntheticConfig, TrainConfig

    sampled = {k: (str(v) if isinstance(v, str) else v) for k, v in sampled.items()}
    if setup.own is not None:  # the user's function or command takes the sampled values as they are
        return dict(setup.train_defaults), sampled
    from tuner.models import zoo
    from tuner.models.build import FACTORY

    name = model_of(setup, sampled)
    defaults = setup.model_defaults if name == setup.model_name else {}  # a choice of models: that model's own
    sampled = {k: v for k, v in sampled.items() if k != MODEL_CHOICE}
    train = {**setup.train_defaults, **{k: v for k, v in sampled.items() if k in TrainConfig.model_fields}}
    train = TrainConfig.model_validate(train).model_dump()
    if name == FACTORY or name.startswith(zoo.PREFIX):  # options go to the builder
        options = {k: v for k, v in sampled.items() if k not in TrainConfig.model_fields and k != "augment"}
        return train, {**defaults, **options}
    model_cls = {"cnn": CnnConfig, "synthetic": SyntheticConfig}.get(name, ResNetConfig)
    model = {**defaults, **{k: v for k, v in sampled.items() if k in model_cls.model_fields}}
    model = model_cls.model_validate({"name": name, **model}).model_dump(exclude={"name"})
    return train, model


def model_of(setup: TrialSetup, sampled: dict[str, Any]) -> str:
    """The model a trial trains: the sweep's, or the one it took from a choice of models."""
    from tuner.sweepfile.sections import MODEL_CHOICE

    if setup.own is None and MODEL_CHOICE in sampled:
        return str(sampled[MODEL_CHOICE])
    return setup.model_name


# --- the Tune side ------------------------------------------------------------------------
def with_kept_parameters(function: Any, **values: Any) -> Any:
    """``tune.with_parameters(function, **values)``, each value fetched once per trial process
    and kept there. Ray's own fetches every value from the object store at each trial's start
    (its registry's ``ray.get``): with reused trial processes, 8.4 ms between Tune's start of
    a trial and its function's entry against 3.3 ms for a plain function (docs/ray-notes.md). The
    values (a sweep's TrialSetup, its data's handle) are the same for every trial of a sweep."""
    import ray

    refs = {name: ray.put(value) for name, value in values.items()}  # owned by the driver, for the sweep

    def with_values(config: dict[str, Any]) -> Any:
        return function(config, **{name: _kept(ref) for name, ref in refs.items()})

    with_values.__name__ = function.__name__  # Tune names the trials' folders after it
    return with_values


_KEPT: dict[str, Any] = {}  # in a trial process: the values fetched, by their object's id


def _kept(ref: Any) -> Any:
    key = ref.hex()
    if key not in _KEPT:
        import ray

        _KEPT[key] = ray.get(ref)
    return _KEPT[key]


def trial_driver(sampled: dict[str, Any], setup: TrialSetup, data: list[Any]) -> None:
    """Tune trainable: the training loop, run directly or as a TorchTrainer."""
    from ray import tune

    entered_at = time.time()
    train, model_options = resolve_hyperparameters(setup, sampled)
    trial_id = tune.get_context().get_trial_id()
    loop = LoopSettings(
        train=train,
        model_name=model_of(setup, sampled),
        model_options=model_options,
        data_ref=data[0],
        threads=max(1, int(setup.cpus_per_worker)),
        seed=setup.seed + _stable_int(trial_id),
        trial_id=trial_id,
        entered_at=entered_at,
        augment=tuple(str(name) for name in sampled.get("augment", setup.augment)),
        crop_padding=setup.crop_padding,
        hooks=setup.hooks,
        own=setup.own,
        code=setup.code,
        measure_latency=setup.measure_latency,
        trial_folder=str(Path(setup.trials_dir) / Path(tune.get_context().get_trial_dir()).name)
        if setup.trials_dir
        else None,
    )
    if setup.direct:
        session = _TuneSession(setup.use_gpu, setup.trials_dir, setup.own_checkpoints, setup.sends_at)
        try:
            run_loop(loop, session)
        except Exception:
            with contextlib.suppress(Exception):  # its finished epochs recorded: a retry resumes from the last
                session.send_held()
            raise
        session.send_held()
    else:
        loop.resume_from = tune.get_checkpoint()  # a Checkpoint (local or at a URI), or None
        _fit_torch_trainer(loop, setup, trial_id)


def _fit_torch_trainer(loop: LoopSettings, setup: TrialSetup, trial_id: str) -> None:
    """One TorchTrainer per trial (or per restore), rank 0's reports relayed to Tune."""
    import ray
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.queue import Queue

    from tuner.trial.relay import RelayToTune
    from tuner.trial.tune_api import tune_report

    if loop.trial_folder is not None:  # the last run's ranks are not this one's
        shutil.rmtree(Path(loop.trial_folder) / RANKS_DIR, ignore_errors=True)
    queue = Queue(actor_options={"num_cpus": 0})
    streamed = None
    if setup.streamed:  # (an in-memory set is not fetched here: the workers map it on their nodes)
        data = ray.get(loop.data_ref)
        streamed = {"train": data.train.dataset, "val": data.val.dataset}
    # A fresh run name per (re)start: a Train run that reuses a name resumes its own
    # last checkpoint and would ignore the one Tune hands over (PBT, retries).
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"loop": loop},  # Train takes a dict
        torch_config=TorchConfig(
            backend="nccl" if setup.use_gpu and not setup.hooks.train_on_cpu else "gloo",
            **({"timeout_s": max(1, int(setup.collective_timeout_s))} if setup.collective_timeout_s else {}),
        ),
        scaling_config=ray.train.ScalingConfig(
            num_workers=setup.workers,
            use_gpu=setup.use_gpu,
            resources_per_worker=worker_resources(setup),
            label_selector=worker_nodes(setup),
        ),
        datasets=streamed,  # each worker reads its shard (Train's DataConfig splits every split, equally)
        run_config=ray.train.RunConfig(
            name=f"{trial_id}-{uuid.uuid4().hex[:6]}",
            storage_path=setup.train_dir,
            callbacks=[RelayToTune(queue)],
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
            failure_config=ray.train.FailureConfig(max_failures=0),  # Tune retries
        ),
    )
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as error:  # noqa: BLE001 - re-raised in the driver thread
            outcome["error"] = error
        finally:
            queue.put(_FIT_DONE)

    thread = threading.Thread(target=fit, name=f"fit-{trial_id}", daemon=True)
    thread.start()
    while (item := queue.get()) != _FIT_DONE:
        metrics, path, filesystem = item
        checkpoint = tune.Checkpoint(path, filesystem=filesystem) if path else None
        tune_report(metrics, checkpoint=checkpoint)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]


def _stable_int(text: str) -> int:
    return int.from_bytes(text.encode()[-4:].rjust(4, b"\0"), "big") % 100_000


# --- the Train side ----------------------------------------------------------------------


class _TrainSession(Session):
    """A Ray Train worker of a TorchTrainer (DDP when world > 1)."""

    def __init__(self, loop: LoopSettings):
        import ray.train
        import ray.train.torch
        import torch

        context = ray.train.get_context()
        self.rank, self.world = context.get_world_rank(), context.get_world_size()
        self.trial_folder = loop.trial_folder
        note_rank(loop.trial_folder, self.rank)
        self.device = torch.device("cpu") if loop.hooks.train_on_cpu else ray.train.torch.get_device()
        self.resume_from = loop.resume_from

    def alive(self) -> None:
        if self.rank == 0:  # (a rank stuck in a collective holds rank 0's steps too)
            touch_alive(self.trial_folder)

    def trial_dir(self) -> Path | None:
        """Rank 0's: the trial's folder in the sweep (its command's log and relative writes
        beside the trial's records); the other ranks write in folders of their own."""
        if self.rank != 0 or self.trial_folder is None:
            return None
        folder = Path(self.trial_folder)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def resume_checkpoint(self) -> Any:
        import ray.train

        # Train's own, after a worker-group restart; else the one Tune handed over.
        return ray.train.get_checkpoint() or self.resume_from

    def resume_state(self) -> dict[str, Any] | None:
        checkpoint = self.resume_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as folder:  # fetched first where it is at a URI
            return load_state(folder)

    def prepare_model(self, model: nn.Module) -> nn.Module:
        import ray.train.torch

        return ray.train.torch.prepare_model(model, move_to_device=self.device)  # DDP when world > 1

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)

    def dataset_shard(self, name: str, dataset: Any) -> Any:
        import ray.train

        return ray.train.get_dataset_shard(name)  # Train split the trainer's datasets, one equal shard per rank


class _TuneSession(Session):
    """The Tune trial's own process (direct mode): one worker, reports straight to Tune."""

    rank, world = 0, 1

    def __init__(
        self,
        use_gpu: bool,
        trials_dir: str | None = None,
        own_checkpoints: bool = False,
        sends_at: frozenset[int] | None = None,
    ):
        self.trials_dir = trials_dir
        self.use_gpu = use_gpu
        self.own_checkpoints = own_checkpoints and trials_dir is not None
        self.reports = 0  # by this (re)start
        self.sends_at = sends_at if self.own_checkpoints else None
        self.held: list[tuple[dict[str, Any], float]] = []  # (an epoch's report, when) not yet sent
        self.sent_at = time.monotonic()
        if use_gpu:  # the current CUDA device is set before the user's code or the loop runs
            self.device  # noqa: B018

    @functools.cached_property
    def device(self) -> torch.device:
        """Tune sets CUDA_VISIBLE_DEVICES to the trial's GPU share, so it is device 0."""
        import torch

        if self.use_gpu and torch.cuda.is_available():
            torch.cuda.set_device(0)
            return torch.device("cuda", 0)
        return torch.device("cpu")

    def resume_checkpoint(self) -> Any:
        from ray import tune

        if self._own_start is None:
            return tune.get_checkpoint()  # PBT exploit, retry, HyperBand resume, sweep resume
        path, _ = self._own_start
        return tune.Checkpoint.from_directory(str(path)) if path is not None else None

    @functools.cached_property
    def _own_start(self) -> tuple[Path | None, int] | None:
        """Where a trial that keeps its own checkpoints starts: its newest checkpoint folder
        (a retry, a resumed sweep) and the iteration it was taken at, or (None, 0); None
        where Tune keeps the checkpoints (the sweep's scheduler moves trials, or Tune holds
        one for this trial: a sweep begun before trials kept their own)."""
        from ray import tune

        if not self.own_checkpoints or tune.get_checkpoint() is not None:
            return None
        folder = self.trial_dir()
        if latest_own_checkpoint(folder) is None:
            return None, 0  # a first start (the history is not read: nothing to check)
        from tuner.folder.records import recorded_checkpoints

        recorded = recorded_checkpoints(Path(self.trials_dir).parent, tune.get_context().get_trial_id())
        return latest_own_checkpoint(folder, recorded) or (None, 0)

    def resume_state(self) -> dict[str, Any] | None:
        checkpoint = self.resume_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as folder:
            return load_state(folder)

    def trial_dir(self) -> Path | None:
        """The trial's own folder in the sweep (``tune/<trial>/``). Tune's ``get_trial_dir``
        names a staging folder of Ray's session, which a reused trial process never copies
        back (docs/ray-notes.md); a sweep at a URI gets that staging folder all the same."""
        return self._trial_dir

    @functools.cached_property
    def _trial_dir(self) -> Path:
        """Made once per session (a session is one start of one trial): a report asks for it
        two or three times."""
        from ray import tune

        staging = Path(tune.get_context().get_trial_dir())
        folder = Path(self.trials_dir) / staging.name if self.trials_dir else staging
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def staging_dir(self) -> Path | None:
        return self.trial_dir() if self._own_start is not None else None

    def prepare_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def alive(self) -> None:
        if self.trials_dir is not None:
            touch_alive(self.trial_dir())

    def threads(self, own: int) -> int:
        if self.trials_dir is None or (self.use_gpu and self.device.type != "cpu"):
            return own
        from ray import tune

        from tuner.folder.store import LENT_CORES_FILE

        try:
            lent = json.loads((Path(self.trials_dir) / LENT_CORES_FILE).read_text())
        except (OSError, ValueError):  # none lent yet (or being replaced: it is written whole)
            return own
        return max(own, int(lent.get(tune.get_context().get_trial_id(), own)))

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        from ray import tune

        from tuner.trial.tune_api import tune_report

        if self._own_start is not None:
            # The trial's own checkpoint, in its folder: no Tune `save` round trip after the
            # report, no copy through Tune's storage. Tune counts iterations from 1 at every
            # (re)start without a checkpoint of its own, so the trial counts them itself.
            self.reports += 1
            iteration = self._own_start[1] + self.reports
            metrics = {**metrics, "training_iteration": iteration}
            if checkpoint_dir:
                metrics[OWN_CHECKPOINT] = write_own_checkpoint(self.trial_dir(), checkpoint_dir, iteration)
            self.held.append((metrics, time.time()))
            if self._must_send(iteration):
                self.send_held()
            return
        # Tune copies the folder into the trial's storage before report returns.
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune_report(metrics, checkpoint=checkpoint)  # Ray Tune's own (a user's Ray Tune function has ours)

    def _must_send(self, iteration: int) -> bool:
        """Whether Tune must have this epoch now: the scheduler acts at it, it is the last,
        it is the first of this (re)start, or the trial has sent nothing for ``REPORT_EVERY_S``
        (its progress, the stall watchdog). A held epoch is sent only by the next report or
        the trial's end: a trial that hangs, or is killed, after one loses it (at most
        ``REPORT_EVERY_S`` of work; its retry resumes from the last epoch sent), but never
        its first, so that a trial stuck after its first epoch is stalled "after epoch 1"."""
        if self.sends_at is None or self.reports == 1:
            return True
        due = iteration in self.sends_at or iteration >= max(self.sends_at, default=0)
        return due or time.monotonic() - self.sent_at >= REPORT_EVERY_S

    def send_held(self) -> None:
        """Report the newest held epoch to Tune, carrying the ones before it (the driver's
        records unpack them: tuner.folder.records.epochs_in); a user's Ray Tune function's
        ``tune.report`` sees no difference but the time it no longer waits."""
        from tuner.trial.tune_api import tune_report

        if not self.held:
            return
        (metrics, last_at), earlier = self.held[-1], self.held[:-1]
        if earlier:
            metrics = {**metrics, EARLIER_EPOCHS: [{**epoch, HELD_S: last_at - at} for epoch, at in earlier]}
        self.held = []
        tune_report(metrics)
        self.sent_at = time.monotonic()

    def dataset_shard(self, name: str, dataset: Any) -> Any:
        return dataset  # one worker reads the whole split


def train_loop_per_worker(config: dict[str, LoopSettings]) -> None:
    """One worker of a TorchTrainer trial."""
    run_loop(config["loop"], _TrainSession(config["loop"]))


def run_loop(loop: LoopSettings, session: Session) -> None:
    """tuner's loop, or the user's function or command, with the user's code (if any)
    written on this node and first on the path."""
    folder = loop.code.materialise() if loop.code is not None else None
    if folder is not None:
        put_first_on_path(folder)
    if loop.own is not None:
        run_own(loop, session, loop.own, folder)
    else:
        from tuner.trial.loop import run_training

        run_training(loop, session)
