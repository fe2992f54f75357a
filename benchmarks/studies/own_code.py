"""What tuner's machinery costs a user's training function, against tuner's built-in
synthetic trial, side by side (issue 25's target: within 1.1x).

    python benchmarks/studies/own_code.py                        # 300 trials x 10 reports, 2 rounds (~10 min)
    python benchmarks/studies/own_code.py --trials 50 --rounds 1 # a quick look

Both contestants are ``python -m tuner sweep`` runs, in turns, with everything tuner
records (history, MLflow's nested runs in sqlite, TensorBoard, a checkpoint every
report, the export; no registered model for either, so that the export's cost is alike):

- ``synthetic``: ``model: {name: synthetic, epoch_s: 0}``: tuner's own trial, reporting
  a known curve of ``lr`` every epoch with a tiny checkpoint (tuner/trial/synthetic.py).
- ``function``: ``trainable: curve:train``, a user's function in a folder of its own that
  reports the same curve through ``context.report`` with a checkpoint folder per report.

Prints each run's wall time and the ratio function / synthetic (median over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

EPOCHS = 10
FUNCTION = """
import json
from pathlib import Path

from tuner.trial import synthetic


def train(params, context):
    skill = 0.0
    if context.checkpoint is not None:
        skill = json.loads((context.checkpoint / "skill.json").read_text())["skill"]
    folder = context.trial_dir / "state"
    folder.mkdir(exist_ok=True)
    for epoch in range(context.start_epoch, context.max_epochs):
        skill = synthetic.step(skill, params["lr"])
        accuracy, loss = synthetic.observe(skill, 0.005, 0, epoch + 1)
        (folder / "skill.json").write_text(json.dumps({"skill": skill}))
        context.report({"val_accuracy": accuracy, "val_loss": loss}, checkpoint=folder)
"""


def sweep_file(folder: Path, kind: str, trials: int) -> Path:
    sweep = {
        "name": kind,
        "output_dir": str(folder / "runs"),
        "train": {"epochs": EPOCHS},
        "space": {"params": {"lr": {"loguniform": [1e-4, 1e-1]}}},
        "trials": {"num_samples": trials},
        "tracking": {"mlflow": {"registry": False}},
    }
    if kind == "synthetic":
        sweep.update(data={"dataset": "synthetic"}, model={"name": "synthetic", "epoch_s": 0})
    else:
        (folder / "curve.py").write_text(FUNCTION)
        sweep.update(trainable="curve:train")
    path = folder / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def timed_sweep(kind: str, trials: int) -> float:
    with tempfile.TemporaryDirectory(prefix=f"own-{kind}-") as folder:
        path = sweep_file(Path(folder), kind, trials)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(path)], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{kind}: tuner sweep exited {done.returncode}: {done.stderr.strip()[-500:]}")
        return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"synthetic": [], "function": []}
    for round_ in range(args.rounds):
        order = ["synthetic", "function"] if round_ % 2 == 0 else ["function", "synthetic"]
        for kind in order:
            walls[kind].append(timed_sweep(kind, args.trials))
            print(f"round {round_ + 1}: {kind:<9} {walls[kind][-1]:7.1f} s", flush=True)
    synthetic, function = statistics.median(walls["synthetic"]), statistics.median(walls["function"])
    print(
        f"\n{args.trials} trials x {EPOCHS} reports, median of {args.rounds}: synthetic {synthetic:.1f} s, "
        f"a user's function {function:.1f} s; ratio function / synthetic = {function / synthetic:.3f}"
    )


if __name__ == "__main__":
    main()
