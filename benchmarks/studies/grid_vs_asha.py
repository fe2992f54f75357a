"""The grid-search headline: ASHA against a full grid over the same space and epochs.

    TUNER_DATA_DIR=DIR python benchmarks/studies/grid_vs_asha.py            # ~8 min on 2 cores
    python benchmarks/studies/grid_vs_asha.py --subset 2000 --epochs 4       # a quick check

A 16-point grid over two hyperparameters of the default light CNN (4 learning rates x 4
dropout rates), every point trained for ``--epochs`` epochs with no early stopping
(FIFO), against the same 16 points under ASHA (grace period 1, reduction factor 4) with
the same maximum epochs. Both are ``python -m tuner sweep`` on the same data, two trials
at a time; each is timed from outside as a whole command. The test accuracy is that of
each sweep's exported best model (chosen on validation accuracy) on MNIST's 10,000 test
images.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
LRS = [5e-4, 1e-3, 2e-3, 4e-3]
DROPOUTS = [0.0, 0.15, 0.3, 0.45]


def sweep_file(folder: Path, scheduler: dict, epochs: int, subset: int, data_root: str | None) -> Path:
    sweep = yaml.safe_load((REPO / "experiments" / "mnist_asha.yaml").read_text())
    name = f"grid_{scheduler['name']}"
    sweep.update(name=name, output_dir=str(folder / "runs"), seed=0)
    sweep["data"].update(train_subset=subset, download=False, **({"root": data_root} if data_root else {}))
    sweep["train"].update(epochs=epochs)
    sweep["space"] = {"params": {"lr": {"grid": LRS}, "dropout": {"grid": DROPOUTS}}}
    sweep["trials"] = {"num_samples": 1}
    sweep["scheduler"] = scheduler
    sweep["tracking"] = {"mlflow": {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}"}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def run(folder: Path, scheduler: dict, epochs: int, subset: int, data_root: str | None) -> dict:
    from tuner.folder.records import trial_histories
    from tuner.folder.store import SweepFolder

    folder.mkdir(parents=True, exist_ok=True)
    path = sweep_file(folder, scheduler, epochs, subset, data_root)
    print(f"--- {scheduler['name']}: 16 trials, up to {epochs} epochs", flush=True)
    started = time.perf_counter()
    with open(folder / f"{path.stem}.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(path)], stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the {scheduler['name']} sweep failed; see {folder / (path.stem + '.log')}")
    sweep_dir = folder / "runs" / path.stem
    best = json.loads((sweep_dir / "best" / "metrics.json").read_text())
    histories = trial_histories(SweepFolder(sweep_dir))
    result = {
        "wall_s": wall,
        "epochs_run": sum(len(rows) for rows in histories.values()),
        "trials": len(histories),
        "best_val_accuracy": best["val_accuracy"],
        "test_accuracy": best["test_accuracy"],
        "best_hyperparameters": yaml.safe_load((sweep_dir / "best" / "config.yaml").read_text()).get("hyperparameters"),
    }
    print(f"    {json.dumps(result)}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--subset", type=int, default=6000, help="training images (a tenth held out for validation)")
    parser.add_argument("--data-root", default=None, help="default: $TUNER_DATA_DIR")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or REPO / "benchmarks" / "results" / f"grid-vs-asha-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    grid = run(out, {"name": "fifo"}, args.epochs, args.subset, args.data_root)
    asha = run(
        out, {"name": "asha", "grace_period": 1, "reduction_factor": 4}, args.epochs, args.subset, args.data_root
    )
    summary = {
        "epochs": args.epochs,
        "subset": args.subset,
        "grid": grid,
        "asha": asha,
        "wall_ratio": asha["wall_s"] / grid["wall_s"],
        "epochs_ratio": asha["epochs_run"] / grid["epochs_run"],
        "test_accuracy_points": 100 * (asha["test_accuracy"] - grid["test_accuracy"]),
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    print(
        f"\nASHA: {asha['wall_s']:.0f} s, {asha['epochs_run']} epochs, test {asha['test_accuracy']:.4f}; "
        f"grid: {grid['wall_s']:.0f} s, {grid['epochs_run']} epochs, test {grid['test_accuracy']:.4f}\n"
        f"wall {summary['wall_ratio']:.2f}x, epochs {summary['epochs_ratio']:.2f}x, "
        f"test accuracy {summary['test_accuracy_points']:+.2f} points\nwritten: {out / 'results.json'}"
    )


if __name__ == "__main__":
    main()
