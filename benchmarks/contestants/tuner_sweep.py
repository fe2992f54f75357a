"""tuner: the default sweep (experiments/mnist_asha.yaml) run through the CLI, on the budget.

Only the budget is changed: the trials' learning rates (a grid, so every contestant
trains the same ones), the model widths, the epochs, and where the sweep writes.
``--workers 2`` runs each trial as a two-worker DDP TorchTrainer instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from common import REPO, Budget, scored_curve, write_result


def sweep_file(budget: Budget, folder: Path, workers: int, max_concurrent: int | None) -> Path:
    sweep = yaml.safe_load((REPO / "experiments" / "mnist_asha.yaml").read_text())
    sweep["name"] = f"bench_{budget.suite}_w{workers}"
    sweep["output_dir"] = str(folder)
    sweep["seed"] = budget.seed
    sweep["data"].update(root=budget.data_root, download=False, val_fraction=budget.val_fraction)
    if budget.train_subset:
        sweep["data"]["train_subset"] = budget.train_subset
    # The budget's model and training exactly (the default sweep's own choices, e.g. its
    # BatchNorm and cosine schedule, are not the other contestants').
    sweep["model"] = {"name": "cnn", **budget.model}
    sweep["train"] = {"epochs": budget.epochs, "batch_size": budget.batch_size}
    sweep["space"] = {"params": {"lr": {"grid": budget.lrs}}}
    sweep["trials"] = {"num_samples": 1, **({"max_concurrent": max_concurrent} if max_concurrent else {})}
    sweep["scheduler"].update(grace_period=budget.grace_period, reduction_factor=budget.reduction_factor)
    if budget.epochs < 2:  # ASHA needs two epochs to act (the memory probes run one)
        sweep["scheduler"] = {"name": "fifo"}
    sweep["scaling"] = {"workers": workers, "cpus_per_worker": 1}
    # Every epoch's checkpoint kept, so that the best model at any moment can be scored
    # on the test set afterwards (the equal-wall-clock figure); pruning only deletes.
    sweep["checkpoint"] = {"keep": max(budget.epochs, 1)}
    path = folder / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def timings(sweep_dir: Path) -> dict:
    """Per-trial overheads from the sweep's own records (history and timeline)."""
    from tuner.folder.records import read_timeline, trial_histories
    from tuner.folder.store import SweepFolder

    folder = SweepFolder(sweep_dir)
    histories = trial_histories(folder)
    events = read_timeline(folder)
    starts = {}
    for event in events:
        if event["event"] == "start":
            starts.setdefault(event["trial_id"], event["time"])
    start_to_first_step = [
        rows[0]["first_step_at"] - starts[trial_id] for trial_id, rows in histories.items() if trial_id in starts
    ]
    start_times = sorted(e["time"] for e in events if e["event"] == "start")
    end_to_next_start = []
    for event in events:
        if event["event"] in ("end", "error"):
            later = [t for t in start_times if t >= event["time"]]
            if later:
                end_to_next_start.append(later[0] - event["time"])
    rows = [row for rows in histories.values() for row in rows]
    return {
        "epochs_run": len(rows),
        "compute_s": sum(row["compute_s"] for row in rows),
        "best_val_accuracy": max(row["val_accuracy"] for row in rows),
        "curve": [(row["reported_at"], row["val_accuracy"]) for row in rows],  # when the driver had each epoch
        "images_per_s": [row["images_per_s"] for row in rows],
        "start_to_first_step_s": start_to_first_step,
        "end_to_next_start_s": end_to_next_start,
        "fit_span_s": max(e["time"] for e in events) - min(start_times),
    }


def best_curve(sweep_dir: Path, budget: Budget) -> list[tuple[float, float, float]]:
    """The best model so far at each moment the sweep's best validation accuracy rose,
    with its test accuracy: each improvement's own checkpoint, scored after the sweep."""
    from common import Tensors, accuracy, build_cnn

    from tuner.folder.records import trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.trial.session import load_state

    epochs = []
    for trial_id, rows in trial_histories(SweepFolder(sweep_dir)).items():
        (trial_dir,) = (sweep_dir / "tune").glob(f"*{trial_id}*")
        epochs += [(row["reported_at"], row["val_accuracy"], trial_dir / row["checkpoint_dir_name"]) for row in rows]
    model, data = build_cnn(budget), Tensors(budget)

    def test_accuracy(checkpoint: Path) -> float:
        model.load_state_dict(load_state(checkpoint)["model"])
        return accuracy(model, data.test_x, data.test_y)

    return scored_curve(epochs, test_accuracy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--max-concurrent", type=int, default=None)
    args = parser.parse_args()
    budget = Budget.from_json(args.budget)
    folder = Path(args.out).parent / "tuner_runs"
    folder.mkdir(parents=True, exist_ok=True)
    path = sweep_file(budget, folder, args.workers, args.max_concurrent)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(path)], cwd=folder)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tuner sweep failed ({done.returncode})")
    sweep_dir = folder / yaml.safe_load(path.read_text())["name"]
    best = json.loads((sweep_dir / "best" / "metrics.json").read_text())
    write_result(
        args.out,
        workers=args.workers,
        **timings(sweep_dir),
        test_accuracy=best["test_accuracy"],
        best_curve=best_curve(sweep_dir, budget) if args.workers == 1 else [],
        inner_wall_s=wall,
    )


if __name__ == "__main__":
    main()
