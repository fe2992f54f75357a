"""The training loop, whatever hosts it: model, optimiser, learning-rate schedule,
augmentation, epochs, evaluation, checkpoints and the metrics each epoch reports.

``run_training`` is hosted by a ``Session`` (tuner/trial/runner.py: the Tune trial's own
process, or a Ray Train worker of a TorchTrainer), which gives it its rank, device and
resume state and takes its reports. Its data come from an ``InMemoryData`` (the node's
one uint8 copy in the object store, on the worker's device, with this rank's share of
each epoch) or a ``StreamedData`` (this rank's shard of a Ray Data pipeline, for a set
too large for the object store); the loop only asks either for batches.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from tuner.data.datasets import TrainingData, normalise
from tuner.models.build import build_model
from tuner.trial.session import LoopSettings, Session, report_epoch

LOOK_FOR_CORES_S = 2.0  # how often a step asks whether the sweep lends its trial idle cores


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


class InMemoryData:
    """The data on the worker's device, and this rank's share of an epoch."""

    def __init__(
        self,
        data: TrainingData,
        device: torch.device,
        rank: int,
        world: int,
        *,
        augmented: bool = False,
        normalise_once: bool | None = None,
    ):
        with warnings.catch_warnings():  # object-store arrays are read-only; we never write
            warnings.simplefilter("ignore", UserWarning)
            to = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
            self.train_x, self.train_y = to(data.train.images), to(data.train.labels)
            self.val_x, self.val_y = to(data.val.images), to(data.val.labels)
        self.mean, self.std = data.mean, data.std
        # On a GPU a light model's step is short enough for the per-batch conversion and
        # standardisation (four kernels) to show (benchmarks/studies/gpu_step.py): by
        # default the split is normalised once there, where its float32 copy takes no more
        # than an eighth of the device's free memory. Augmentation works on uint8 batches,
        # so the training split then stays uint8.
        if normalise_once is None:
            normalise_once = device.type == "cuda" and self._float_copy_fits(device)
        if normalise_once:
            self.val_x = normalise(self.val_x, self.mean, self.std)
            if not augmented:
                self.train_x = normalise(self.train_x, self.mean, self.std)
        self.rank, self.world, self.device = rank, world, device
        self.per_rank = len(self.train_y) // world  # images a rank trains on per epoch

    def epoch_indices(self, seed: int, epoch: int) -> torch.Tensor:
        """Same permutation on every rank (seeded by epoch), one equal block per rank."""
        generator = torch.Generator().manual_seed(seed * 10_007 + epoch)
        order = torch.randperm(len(self.train_y), generator=generator)
        return order[self.rank * self.per_rank : (self.rank + 1) * self.per_rank].to(self.device)

    def _float_copy_fits(self, device: torch.device) -> bool:
        free, _ = torch.cuda.mem_get_info(device)
        return 4 * (self.train_x.numel() + self.val_x.numel()) <= free // 8

    def batch(self, images: torch.Tensor, labels: torch.Tensor, index: torch.Tensor, augmented: Any = None):
        """Normalised float images and their labels; ``augmented`` changes the uint8 batch first."""
        chosen = images[index]
        if augmented is not None:
            chosen = augmented(chosen)
        if chosen.dtype == torch.uint8:
            chosen = normalise(chosen, self.mean, self.std)
        return chosen, labels[index]

    def train_batches(self, seed: int, epoch: int, batch_size: int, augmented: Any) -> Iterator[tuple[Any, Any]]:
        indices = self.epoch_indices(seed, epoch)
        for begin in range(0, len(indices), batch_size):
            yield self.batch(self.train_x, self.train_y, indices[begin : begin + batch_size], augmented)

    def val_batches(self, batch_size: int = 1024) -> Iterator[tuple[Any, Any]]:
        """This rank's share of the validation set (every world-th image)."""
        index = torch.arange(self.rank, len(self.val_y), self.world, device=self.device)
        for begin in range(0, len(index), batch_size):
            yield self.batch(self.val_x, self.val_y, index[begin : begin + batch_size])


class StreamedData:
    """The data as a Ray Data stream (``tuner.data.datasets.StreamingData``): this rank's shard of
    each split, decoded by the pipeline's tasks as the epoch reads it, shuffled per epoch
    (block order, then a local buffer), augmented and normalised on the worker's device."""

    SHUFFLE_BUFFER = 2048  # images

    def __init__(self, data: Any, device: torch.device, rank: int, world: int, shard: Any):
        self.train, self.val = shard("train", data.train.dataset), shard("val", data.val.dataset)
        self.mean, self.std = data.mean, data.std
        self.rank, self.world, self.device = rank, world, device
        self.per_rank = len(data.train) // world

    def _batches(self, source: Any, batch_size: int, **shuffle: Any) -> Iterator[tuple[Any, Any]]:
        for batch in source.iter_torch_batches(
            batch_size=batch_size, device=self.device, dtypes={"image": torch.uint8, "label": torch.int64}, **shuffle
        ):
            yield batch["image"], batch["label"]

    def train_batches(self, seed: int, epoch: int, batch_size: int, augmented: Any) -> Iterator[tuple[Any, Any]]:
        shuffle = {"local_shuffle_buffer_size": self.SHUFFLE_BUFFER, "local_shuffle_seed": seed * 10_007 + epoch}
        for images, labels in self._batches(self.train, batch_size, **shuffle):
            if augmented is not None:
                images = augmented(images)
            yield normalise(images, self.mean, self.std), labels

    def val_batches(self, batch_size: int = 1024) -> Iterator[tuple[Any, Any]]:
        for images, labels in self._batches(self.val, batch_size):
            yield normalise(images, self.mean, self.std), labels


def _augmentation(loop: LoopSettings, device: torch.device, epoch: int, rank: int) -> Any:
    """The epoch's augmentation of uint8 batches (tuner/data/augment.py), seeded per trial,
    epoch and rank so a resumed epoch repeats it; None without data.augment."""
    if not loop.augment:
        return None
    from tuner.data import augment

    generator = augment.generator_for(device, loop.seed, epoch, rank)
    return lambda x: augment.apply(x, loop.augment, padding=loop.crop_padding, generator=generator)


def run_training(loop: LoopSettings, session: Session) -> None:
    """Train, evaluate, checkpoint and report every epoch (one worker's share under DDP)."""
    import ray

    rank, world, device = session.rank, session.world, session.device
    torch.set_num_threads(loop.threads)
    torch.manual_seed(loop.seed)
    train = loop.train
    data = ray.get(loop.data_ref)  # in memory: zero-copy views of the node's one copy
    nodes = _node_ids(world)
    if isinstance(data, TrainingData):
        shards: InMemoryData | StreamedData = InMemoryData(data, device, rank, world, augmented=bool(loop.augment))
    else:
        shards = StreamedData(data, device, rank, world, session.dataset_shard)

    model = build_model(
        loop.model_name,
        in_channels=data.channels,
        num_classes=data.num_classes,
        image_size=data.size,
        options=loop.model_options,
    )
    start_epoch, resumed_from = 0, ""
    state = session.resume_state()
    if state is not None:
        model.load_state_dict(state["model"])
        start_epoch, resumed_from = int(state["epoch"]), str(state["trial_id"])
    elif loop.model_options.get("weights"):  # a torchvision network from a local state dict
        from tuner.models import zoo

        zoo.load_weights(model, loop.model_options["weights"], data.channels)
    if loop.model_name == "synthetic":  # no training: a known curve (tuner/trial/synthetic.py)
        from tuner.trial import synthetic

        return synthetic.run(loop, session, model, state)
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
    steps_per_epoch = math.ceil(shards.per_rank / batch_size)
    scheduled = train["lr_schedule"] != "constant"
    first_step_at = time.time()  # this (re)start's first training step begins now
    timing = {"entered_at": loop.entered_at, "first_step_at": first_step_at}
    unwrapped = model.module if hasattr(model, "module") else model
    measured: dict[str, float] = {"params": float(sum(p.numel() for p in unwrapped.parameters()))}

    threads, look_at = loop.threads, 0.0
    for epoch in range(start_epoch, epochs):
        started = time.perf_counter()
        model.train()
        augmented = _augmentation(loop, device, epoch, rank)
        loss_sum = torch.zeros((), device=device)
        seen = 0
        batches = shards.train_batches(loop.seed, epoch, batch_size, augmented)
        for step, (x, y) in enumerate(batches):
            if time.monotonic() >= look_at:  # the sweep's spare cores, lent or taken back (SpareCores)
                look_at = time.monotonic() + LOOK_FOR_CORES_S
                session.alive()  # and a sign of life for the stall watchdog (tuner.driver.stalls)
                if (lent := session.threads(loop.threads)) != threads:
                    threads = lent
                    torch.set_num_threads(threads)
            if scheduled or step == 0:  # a constant rate is set once an epoch (PBT may change it between)
                lr = learning_rate(
                    train["lr"], train["lr_schedule"], epoch * steps_per_epoch + step, epochs * steps_per_epoch
                )
                for group in optimizer.param_groups:
                    group["lr"] = lr
            seen += len(y)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            # Per step, only what the step needs: no autocast or grad scaler where they do
            # nothing (on a CPU a light CNN's step is short enough for them to show).
            with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext():
                loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            if scaler.is_enabled():
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            loss_sum.add_(loss.detach(), alpha=len(y))  # one kernel a step, not two
        loop.hooks.after_epoch(loop.trial_id, epoch + 1)
        val_loss, val_accuracy, train_loss = _evaluate(model, shards, loss_fn, amp_dtype, loss_sum, seen * world)
        compute_s = time.perf_counter() - started
        if loop.measure_latency:  # not part of the epoch's compute time
            measured["latency_ms"] = _latency_ms(model, shards, amp_dtype)
        metrics = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": lr,
            "compute_s": compute_s,
            "images_per_s": seen * world / compute_s,
            "train_images": seen * world,  # every rank's share of the epoch
            "resumed_from": resumed_from,
            "world_size": world,
            "threads": threads,  # at the epoch's end
            "nodes": nodes,
            **measured,
            **timing,
        }
        unwrapped = model.module if hasattr(model, "module") else model
        state = {"model": unwrapped.state_dict(), "optimizer": optimizer.state_dict()} if rank == 0 else None
        report_epoch(session, metrics, state, epoch + 1, loop.trial_id)


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
def _latency_ms(model: nn.Module, shards: InMemoryData | StreamedData, amp_dtype: Any, images: int = 64) -> float:
    """Milliseconds of inference per image: the best of 3 forward passes over a batch of
    ``images`` validation images (one rank's; every rank measures its own)."""
    model.eval()
    x, _ = next(iter(shards.val_batches(batch_size=images)))
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        with torch.autocast(shards.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            model(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        timings.append(time.perf_counter() - started)
    return 1000 * min(timings) / len(x)


@torch.no_grad()
def _evaluate(
    model, shards: InMemoryData | StreamedData, loss_fn, amp_dtype, train_loss_sum, train_count
) -> tuple[float, float, float]:
    """Validation loss/accuracy over every rank's share, plus the epoch's train loss."""
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=shards.device)  # loss, correct, n, train loss
    for x, y in shards.val_batches():
        with torch.autocast(shards.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(x)
        totals[0] += loss_fn(logits.float(), y).item() * len(y)
        totals[1] += (logits.argmax(1) == y).sum()
        totals[2] += len(y)
    totals[3] = train_loss_sum
    if shards.world > 1:
        torch.distributed.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item(), (totals[3] / train_count).item()
