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
its checkpoints are the same: only the ``_Session`` (rank, device, resume, report)
differs.

Nothing here reads YAML: the driver receives the sampled hyperparameters and a
``TrialSetup`` of plain values.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tuner.data import TrainingData, normalise
from tuner.models import build_model

CHECKPOINT_FILE = "checkpoint.pt"
_FIT_DONE = "__tuner_fit_done__"


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
    fail_once_at_epoch: int | None = None  # test-only fault switch (TUNER_TEST_FAIL_AT_EPOCH)
    train_on_cpu: bool = False  # test-only: GPUs declared to Ray, none present (TUNER_TEST_TRAIN_ON_CPU)
    augment: tuple[str, ...] = ()  # data.augment (a trial may sample its own)
    crop_padding: int = 4


# A trial's CPUs are reserved by Tune, one bundle per worker in the trial's placement
# group, so that Tune's own scheduling decides how many trials run (and HyperBand can
# pause some while others run). The driver runs in bundle 0; each Train worker asks a
# token share of CPU, pinned to its bundle's node, so a trial spans nodes exactly as its
# bundles do. (A Train run killed while its workers are still being placed can leave its
# own placement group behind - docs/ray-notes.md - and a token's worth is harmless.)
# GPUs are reserved by Train's workers themselves, out of Tune's sight: the sweep caps
# the trials it starts at the cluster's GPU slots (tuner.searchers).
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
    from tuner.config import CnnConfig, ResNetConfig, TrainConfig

    model_cls = CnnConfig if setup.model_name == "cnn" else ResNetConfig
    sampled = {k: (str(v) if isinstance(v, str) else v) for k, v in sampled.items()}
    train = {**setup.train_defaults, **{k: v for k, v in sampled.items() if k in TrainConfig.model_fields}}
    model = {**setup.model_defaults, **{k: v for k, v in sampled.items() if k in model_cls.model_fields}}
    train = TrainConfig.model_validate(train).model_dump()
    model = model_cls.model_validate({"name": setup.model_name, **model}).model_dump(exclude={"name"})
    return train, model


# --- the Tune side ------------------------------------------------------------------------
class _RelayToTune:
    """Train callback (runs in Train's controller): pass rank 0's report to the driver."""

    def __init__(self, queue: Any):
        self.queue = queue

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        # At a storage URI a checkpoint's path has no scheme: the filesystem goes along.
        # (Locally the path alone: handing Tune Train's own Checkpoint object kept Train
        # from pruning a TorchTrainer run's old checkpoints in the HyperBand test.)
        import pyarrow.fs

        if checkpoint is None:
            self.queue.put((dict(metrics[0]), None, None))
            return
        local = isinstance(checkpoint.filesystem, pyarrow.fs.LocalFileSystem)
        self.queue.put((dict(metrics[0]), checkpoint.path, None if local else checkpoint.filesystem))


def _relay_callback(queue: Any) -> Any:
    from ray.train.v2.api.callback import UserCallback

    class RelayToTune(_RelayToTune, UserCallback):
        pass

    return RelayToTune(queue)


def trial_driver(sampled: dict[str, Any], setup: TrialSetup, data: list[Any]) -> None:
    """Tune trainable: the training loop, run directly or as a TorchTrainer."""
    from ray import tune

    entered_at = time.time()
    train, model_options = resolve_hyperparameters(setup, sampled)
    trial_id = tune.get_context().get_trial_id()
    loop = {
        "train": train,
        "model_name": setup.model_name,
        "model_options": model_options,
        "data_ref": data[0],
        "threads": max(1, int(setup.cpus_per_worker)),
        "seed": setup.seed + _stable_int(trial_id),
        "trial_id": trial_id,
        "resume_from": None,
        "fail_once_at_epoch": setup.fail_once_at_epoch,
        "fail_marker": os.path.join(
            tempfile.gettempdir() if "://" in setup.train_dir else setup.train_dir, f"{trial_id}.failed-once"
        ),
        "entered_at": entered_at,
        "train_on_cpu": setup.train_on_cpu,
        "augment": [str(name) for name in sampled.get("augment", setup.augment)],
        "crop_padding": setup.crop_padding,
    }
    if setup.direct:
        run_training(loop, _TuneSession(setup.use_gpu))
    else:
        loop["resume_from"] = tune.get_checkpoint()  # a Checkpoint (local or at a URI), or None
        _fit_torch_trainer(loop, setup, trial_id)


def _fit_torch_trainer(loop: dict[str, Any], setup: TrialSetup, trial_id: str) -> None:
    """One TorchTrainer per trial (or per restore), rank 0's reports relayed to Tune."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.queue import Queue

    queue = Queue(actor_options={"num_cpus": 0})
    # A fresh run name per (re)start: a Train run that reuses a name resumes its own
    # last checkpoint and would ignore the one Tune hands over (PBT, retries).
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=loop,
        torch_config=TorchConfig(backend="nccl" if setup.use_gpu and not setup.train_on_cpu else "gloo"),
        scaling_config=ray.train.ScalingConfig(
            num_workers=setup.workers,
            use_gpu=setup.use_gpu,
            resources_per_worker=worker_resources(setup),
            label_selector=worker_nodes(setup),
        ),
        run_config=ray.train.RunConfig(
            name=f"{trial_id}-{uuid.uuid4().hex[:6]}",
            storage_path=setup.train_dir,
            callbacks=[_relay_callback(queue)],
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
        tune.report(metrics, checkpoint=checkpoint)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]


def _stable_int(text: str) -> int:
    return int.from_bytes(text.encode()[-4:].rjust(4, b"\0"), "big") % 100_000


# --- the Train side ----------------------------------------------------------------------
def learning_rate(base_lr: float, schedule: str, step: int, total_steps: int) -> float:
    """The step's learning rate: constant, cosine to zero, or /10 at 50% and 75%."""
    progress = min(1.0, step / max(1, total_steps))
    if schedule == "cosine":
        return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "step":
        return base_lr * (0.1 ** (int(progress >= 0.5) + int(progress >= 0.75)))
    return base_lr


def make_optimizer(model: nn.Module, train: dict[str, Any]) -> torch.optim.Optimizer:
    params, lr, wd = model.parameters(), train["lr"], train["weight_decay"]
    if train["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=train["momentum"], weight_decay=wd, nesterov=True)
    if train["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    return torch.optim.Adam(params, lr=lr, weight_decay=wd)


def load_state(path: str | os.PathLike) -> dict[str, Any]:
    """A tuner checkpoint's state dict (tensors and plain values only: weights_only)."""
    return torch.load(Path(path) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)


class _Shards:
    """The data on the worker's device, and this rank's share of an epoch."""

    def __init__(self, data: TrainingData, device: torch.device, rank: int, world: int):
        with warnings.catch_warnings():  # object-store arrays are read-only; we never write
            warnings.simplefilter("ignore", UserWarning)
            to = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
            self.train_x, self.train_y = to(data.train.images), to(data.train.labels)
            self.val_x, self.val_y = to(data.val.images), to(data.val.labels)
        self.mean, self.std = data.mean, data.std
        self.rank, self.world, self.device = rank, world, device

    def epoch_indices(self, seed: int, epoch: int) -> torch.Tensor:
        """Same permutation on every rank (seeded by epoch), one equal block per rank."""
        generator = torch.Generator().manual_seed(seed * 10_007 + epoch)
        order = torch.randperm(len(self.train_y), generator=generator)
        per_rank = len(order) // self.world
        return order[self.rank * per_rank : (self.rank + 1) * per_rank].to(self.device)

    def batch(self, images: torch.Tensor, labels: torch.Tensor, index: torch.Tensor, augmented: Any = None):
        """Normalised float images and their labels; ``augmented`` changes the uint8 batch first."""
        chosen = images[index]
        if augmented is not None:
            chosen = augmented(chosen)
        return normalise(chosen, self.mean, self.std), labels[index]


class _Session:
    """What the loop needs from whatever runs it: its rank, device, resume state, reports."""

    rank: int
    world: int
    device: torch.device

    def resume_state(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def prepare_model(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        raise NotImplementedError


class _TrainSession(_Session):
    """A Ray Train worker of a TorchTrainer (DDP when world > 1)."""

    def __init__(self, loop: dict[str, Any]):
        import ray.train
        import ray.train.torch

        context = ray.train.get_context()
        self.rank, self.world = context.get_world_rank(), context.get_world_size()
        self.device = torch.device("cpu") if loop["train_on_cpu"] else ray.train.torch.get_device()
        self.resume_from = loop["resume_from"]

    def resume_state(self) -> dict[str, Any] | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()  # Train's own, after a worker-group restart
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                return load_state(folder)
        if self.resume_from is None:
            return None
        with self.resume_from.as_directory() as folder:  # fetched first where it is at a URI
            return load_state(folder)

    def prepare_model(self, model: nn.Module) -> nn.Module:
        import ray.train.torch

        return ray.train.torch.prepare_model(model, move_to_device=self.device)  # DDP when world > 1

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)


class _TuneSession(_Session):
    """The Tune trial's own process (direct mode): one worker, reports straight to Tune."""

    rank, world = 0, 1

    def __init__(self, use_gpu: bool):
        # Tune sets CUDA_VISIBLE_DEVICES to the trial's GPU share, so it is device 0.
        self.device = torch.device("cuda", 0) if use_gpu and torch.cuda.is_available() else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def resume_state(self) -> dict[str, Any] | None:
        from ray import tune

        checkpoint = tune.get_checkpoint()  # PBT exploit, retry, HyperBand resume, sweep resume
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as folder:
            return load_state(folder)

    def prepare_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        from ray import tune

        # Tune copies the folder into the trial's storage before report returns.
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report(metrics, checkpoint=checkpoint)


def train_loop_per_worker(loop: dict[str, Any]) -> None:
    """One worker of a TorchTrainer trial."""
    run_training(loop, _TrainSession(loop))


def _augmentation(loop: dict[str, Any], device: torch.device, epoch: int, rank: int) -> Any:
    """The epoch's augmentation of uint8 batches (tuner/augment.py), seeded per trial,
    epoch and rank so a resumed epoch repeats it; None without data.augment."""
    if not loop["augment"]:
        return None
    from tuner import augment

    generator = augment.generator_for(device, loop["seed"], epoch, rank)
    return lambda x: augment.apply(x, loop["augment"], padding=loop["crop_padding"], generator=generator)


def run_training(loop: dict[str, Any], session: _Session) -> None:
    """Train, evaluate, checkpoint and report every epoch (one worker's share under DDP)."""
    import ray

    rank, world, device = session.rank, session.world, session.device
    torch.set_num_threads(loop["threads"])
    torch.manual_seed(loop["seed"])
    train = loop["train"]
    data: TrainingData = ray.get(loop["data_ref"])  # zero-copy views of the node's one copy
    nodes = _node_ids(world)
    shards = _Shards(data, device, rank, world)

    model = build_model(
        loop["model_name"],
        in_channels=data.channels,
        num_classes=data.num_classes,
        image_size=data.size,
        options=loop["model_options"],
    )
    start_epoch, resumed_from = 0, ""
    state = session.resume_state()
    if state is not None:
        model.load_state_dict(state["model"])
        start_epoch, resumed_from = int(state["epoch"]), str(state["trial_id"])
    channels_last = device.type == "cuda"  # faster convolutions under AMP on tensor cores
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model = session.prepare_model(model)
    optimizer = make_optimizer(model, train)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # PBT may have mutated these
            group.update(lr=train["lr"], weight_decay=train["weight_decay"])
    amp_dtype = _amp_dtype(device, train["amp"])
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=train["label_smoothing"])
    batch_size, epochs = train["batch_size"], train["epochs"]
    steps_per_epoch = math.ceil(len(shards.train_y) // world / batch_size)
    first_step_at = time.time()  # this (re)start's first training step begins now
    timing = {"entered_at": loop["entered_at"], "first_step_at": first_step_at}

    for epoch in range(start_epoch, epochs):
        started = time.perf_counter()
        model.train()
        indices = shards.epoch_indices(loop["seed"], epoch)
        augmented = _augmentation(loop, device, epoch, rank)
        loss_sum = torch.zeros((), device=device)
        for step, begin in enumerate(range(0, len(indices), batch_size)):
            lr = learning_rate(
                train["lr"], train["lr_schedule"], epoch * steps_per_epoch + step, epochs * steps_per_epoch
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = shards.batch(shards.train_x, shards.train_y, indices[begin : begin + batch_size], augmented)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum += loss.detach() * len(y)
        _maybe_fail_once(loop, epoch)
        val_loss, val_accuracy, train_loss = _evaluate(
            model, shards, loss_fn, amp_dtype, loss_sum, len(indices) * world
        )
        compute_s = time.perf_counter() - started
        metrics = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": lr,
            "compute_s": compute_s,
            "images_per_s": len(indices) * world / compute_s,
            "resumed_from": resumed_from,
            "world_size": world,
            "nodes": nodes,
            **timing,
        }
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                unwrapped = model.module if hasattr(model, "module") else model
                torch.save(
                    {
                        "model": unwrapped.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1,
                        "trial_id": loop["trial_id"],
                    },
                    Path(folder) / CHECKPOINT_FILE,
                )
            session.report(metrics, folder if rank == 0 else None)


def _node_ids(world: int) -> str:
    """The Ray node of each rank, in rank order: where this (re)start of the trial runs."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    if world == 1:
        return node
    nodes: list[str] = [""] * world
    torch.distributed.all_gather_object(nodes, node)
    return ",".join(nodes)


def _amp_dtype(device: torch.device, enabled: bool) -> torch.dtype | None:
    if not enabled or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@torch.no_grad()
def _evaluate(model, shards: _Shards, loss_fn, amp_dtype, train_loss_sum, train_count) -> tuple[float, float, float]:
    """Validation loss/accuracy over every rank's share, plus the epoch's train loss."""
    model.eval()
    index = torch.arange(shards.rank, len(shards.val_y), shards.world, device=shards.device)
    totals = torch.zeros(4, dtype=torch.float64, device=shards.device)  # loss, correct, n, train loss
    for begin in range(0, len(index), 1024):
        x, y = shards.batch(shards.val_x, shards.val_y, index[begin : begin + 1024])
        with torch.autocast(shards.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(x)
        totals[0] += loss_fn(logits.float(), y).item() * len(y)
        totals[1] += (logits.argmax(1) == y).sum()
        totals[2] += len(y)
    totals[3] = train_loss_sum
    if shards.world > 1:
        torch.distributed.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item(), (totals[3] / train_count).item()


def _maybe_fail_once(loop: dict[str, Any], epoch: int) -> None:
    """Test-only: raise once, at the given epoch, to prove retries resume from a checkpoint."""
    if loop["fail_once_at_epoch"] is None or epoch + 1 != loop["fail_once_at_epoch"]:
        return
    marker = Path(loop["fail_marker"])
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("failed once on purpose\n")
        raise RuntimeError(f"injected fault at epoch {epoch + 1} (TUNER_TEST_FAIL_AT_EPOCH)")
