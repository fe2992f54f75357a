"""Ray Tune as documented: a Tune sweep whose trials each run a Ray Train TorchTrainer.

The pattern of Ray's own guide ("Hyperparameter Tuning with Ray Tune", Train V2): a
Tune function (the trial driver) builds a ``TorchTrainer`` and forwards its reports
with ``TuneReportCallback``; each worker builds its data with
``torchvision.datasets.MNIST(..., transform=ToTensor())`` and a ``DataLoader``
(``prepare_data_loader``), trains, evaluates, and reports a checkpoint every epoch.
ASHA stops trials as in tuner's sweep. The drivers take a custom resource (docs/ray-notes.md:
a CPU each would deadlock two trials on two CPUs), the workers one CPU each.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

from common import Budget, Clock, build_cnn, contestant_args, scored_curve, write_result


def train_fn_per_worker(config: dict) -> None:
    import ray.train
    import ray.train.torch
    import torch
    import torchvision
    from torch import nn
    from torch.utils.data import DataLoader, Subset

    from tuner.data.datasets import split_indices

    budget = Budget.from_json(config["budget"])
    torch.set_num_threads(1)
    transform = torchvision.transforms.Compose(
        [torchvision.transforms.ToTensor(), torchvision.transforms.Normalize((0.1307,), (0.3081,))]
    )
    full = torchvision.datasets.MNIST(budget.data_root, train=True, transform=transform, download=False)
    train_idx, val_idx = split_indices(
        len(full), val_fraction=budget.val_fraction, train_subset=budget.train_subset, seed=budget.seed
    )
    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(Subset(full, train_idx.tolist()), batch_size=budget.batch_size, shuffle=True)
    )
    val_loader = ray.train.torch.prepare_data_loader(DataLoader(Subset(full, val_idx.tolist()), batch_size=1024))
    model = ray.train.torch.prepare_model(build_cnn(budget))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(budget.epochs):
        started = time.perf_counter()
        if ray.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        model.train()
        for x, y in train_loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += int((model(x).argmax(1) == y).sum())
                total += len(y)
        metrics = {"val_accuracy": correct / total, "epoch": epoch + 1, "compute_s": time.perf_counter() - started}
        with tempfile.TemporaryDirectory() as folder:
            torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def train_driver_fn(config: dict) -> None:
    import ray.train
    import ray.tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trainer = TorchTrainer(
        train_fn_per_worker,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=ray.train.RunConfig(
            name=f"{ray.tune.get_context().get_trial_id()}-{uuid.uuid4().hex[:6]}",
            storage_path=config["storage"],
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()


def torchvision_root(source: str, target: Path) -> str:
    """What ``MNIST(download=True)`` leaves: the IDX files unpacked in ``MNIST/raw``.

    This machine has no network, so unpack the local .gz files the same way.
    """
    from torchvision.datasets.utils import extract_archive

    (target / "MNIST" / "raw").mkdir(parents=True, exist_ok=True)
    for archive in sorted((Path(source) / "MNIST" / "raw").glob("*.gz")):
        extract_archive(str(archive), str(target / "MNIST" / "raw"))
    return str(target)


def main() -> None:
    clock = Clock()
    args = contestant_args(__doc__)
    budget = Budget.from_json(args.budget)
    import ray
    import ray.tune
    import torch
    from common import Tensors, accuracy

    storage = tempfile.mkdtemp(prefix="ray_tune_documented_")
    budget.data_root = torchvision_root(budget.data_root, Path(storage) / "data")
    ray.init(
        address="local",
        num_cpus=budget.slots,
        resources={"trial_driver": budget.slots},
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        log_to_driver=False,
    )
    tuner = ray.tune.Tuner(
        ray.tune.with_resources(train_driver_fn, {"trial_driver": 1}),
        param_space={
            "lr": ray.tune.grid_search(budget.lrs),
            "budget": budget.to_json(),
            "storage": os.path.join(storage, "train"),
        },
        tune_config=ray.tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            scheduler=ray.tune.schedulers.ASHAScheduler(
                time_attr="training_iteration",
                max_t=budget.epochs,
                grace_period=budget.grace_period,
                reduction_factor=budget.reduction_factor,
            ),
            max_concurrent_trials=budget.slots,
        ),
        run_config=ray.tune.RunConfig(storage_path=storage, name="tune", verbose=0),
    )
    results = tuner.fit()
    ray.shutdown()
    best = results.get_best_result(metric="val_accuracy", mode="max", scope="all")
    history = best.metrics_dataframe
    best_row = history.loc[history["val_accuracy"].idxmax()]
    inner_wall = clock()
    model = build_cnn(budget)
    data = Tensors(budget)

    def test_accuracy(checkpoint_path: str) -> float:
        model.load_state_dict(torch.load(Path(checkpoint_path) / "model.pt", weights_only=True))
        return accuracy(model, data.test_x, data.test_y)

    frames = [r.metrics_dataframe for r in results]
    epochs = [
        (float(t), float(v), str(c))
        for f in frames
        for t, v, c in zip(f["timestamp"], f["val_accuracy"], f["checkpoint_path"], strict=True)
    ]
    write_result(
        args.out,
        epochs_run=int(sum(len(f) for f in frames)),
        compute_s=float(sum(f["compute_s"].sum() for f in frames)),
        best_val_accuracy=float(best_row["val_accuracy"]),
        curve=[(at, value) for at, value, _ in epochs],
        test_accuracy=test_accuracy(best_row["checkpoint_path"]),
        best_curve=scored_curve(epochs, test_accuracy),
        inner_wall_s=inner_wall,
    )


if __name__ == "__main__":
    main()
