"""Where a sweep's time goes outside its trials: the fixed cost, part by part.

    TUNER_DATA_DIR=DIR python benchmarks/studies/fixed_cost.py   # the default sweep, as `make sweep` runs it
    TUNER_DATA_DIR=DIR python benchmarks/studies/fixed_cost.py mnist_asha.yaml train.epochs=2 trials.num_samples=2
    python benchmarks/studies/fixed_cost.py --ray-tune     # bare Ray Tune, the same command shape
    python -m tuner ray up && TUNER_DATA_DIR=DIR python benchmarks/studies/fixed_cost.py ...   # joining a warm Ray
    TUNER_DATA_DIR=DIR python benchmarks/studies/fixed_cost.py --outside --runs 3 mnist_asha.yaml ...   # untouched

Runs ``python -m tuner sweep EXPERIMENT --set KEY=VALUE ...`` in a child process that
times tuner's own steps from inside (each wrapped, nothing changed): the imports, reading the
data, ``ray.init``, opening the MLflow store, Tune's set-up until the first trial starts,
the wait after the last trial ends, the export (test score, model files), logging and
registering the model in MLflow, ``ray.shutdown`` and the interpreter's exit (measured
from outside). The fixed cost is the whole command's wall time less the trials' span
(first trial start .. last trial end). It also prints the sweep's best test accuracy,
its epochs and the trials' median throughput (epochs after each trial's first).

``--outside``: ``python -m tuner sweep`` itself, untouched (nothing imported ahead, nothing
wrapped), its fixed cost taken from outside: the command's wall time less the trials' span
in its timeline; ``--runs N`` of them, one after another, each in a folder of its own.
The parts above need the wrappers, and the wrappers' imports (torch among them, before
Ray starts) change what they measure: the headline figure is this one.

``--ray-tune``: the same measure of bare Ray Tune as its docs run it, a script with
``ray.init()``, a ``Tuner`` of 2 trials (a function trainable that imports torch and
reports 2 epochs of 1 s) and ``ray.shutdown()``; its trials' span from a Tune callback on
the driver, as tuner's timeline records it. Issue 43's fixed-cost target compares the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>


def child(out: Path, argv: list[str]) -> None:
    """The sweep, in this process, with tuner's steps timed."""
    marks: dict[str, list[tuple[float, float]]] = {}
    began = time.time()
    import ray
    from ray import tune

    from tuner import cli  # the CLI's own imports, and those it makes later
    from tuner.driver import sweep
    from tuner.results import export
    from tuner.tracking import mlflow_runs as tracking

    imported = time.time()

    def timed(owner, name: str, label: str) -> None:
        plain = getattr(owner, name)

        def wrapper(*args, **kwargs):
            started = time.time()
            try:
                return plain(*args, **kwargs)
            finally:
                marks.setdefault(label, []).append((started, time.time()))

        setattr(owner, name, wrapper)

    timed(sweep, "load_data", "read the data")
    timed(sweep, "start_ray", "ray.init")
    timed(sweep, "ready_data", "data ready in Ray")
    timed(tracking.SweepRecord, "__init__", "open the MLflow store")
    timed(tune.Tuner, "fit", "Tune fit")
    timed(export, "export_best", "export (test score, model files)")
    timed(tracking.SweepRecord, "finish", "log and register the model in MLflow")
    timed(ray, "shutdown", "ray.shutdown")
    code = cli.main(["sweep", *argv])
    ended = time.time()
    (out / "child.json").write_text(
        json.dumps({"code": code, "began": began, "imported": imported, "ended": ended, "marks": marks})
    )
    cli.leave(code)  # as `python -m tuner` ends


def bare_child(out: Path) -> None:
    """Bare Ray Tune as its docs run it, timed as ``child`` times tuner."""
    began = time.time()
    import ray
    from ray import tune

    imported = time.time()
    starts: list[float] = []
    ends: list[float] = []

    class Span(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            starts.append(time.time())

        def on_trial_complete(self, iteration, trials, trial, **info):
            ends.append(time.time())

    def trainable(config):
        import torch  # as a trial that trains does

        for epoch in range(config["epochs"]):
            time.sleep(config["epoch_s"])
            tune.report({"loss": float(torch.tensor(config["lr"]) / (epoch + 1))})

    marks: dict[str, float] = {}
    t0 = time.time()
    ray.init()
    marks["ray.init"] = time.time() - t0
    tuner = tune.Tuner(
        trainable,
        param_space={"epochs": 2, "epoch_s": 1.0, "lr": tune.grid_search([1e-3, 3e-3])},
        run_config=tune.RunConfig(storage_path=str(out / "ray_results"), name="bare", callbacks=[Span()]),
    )
    fit_start = time.time()
    tuner.fit()
    fit_end = time.time()
    t0 = time.time()
    ray.shutdown()
    marks["ray.shutdown"] = time.time() - t0
    (out / "child.json").write_text(
        json.dumps(
            {
                "began": began,
                "imported": imported,
                "ended": time.time(),
                "fit": [fit_start, fit_end],
                "span": [min(starts), max(ends)],
                "marks": marks,
            }
        )
    )


def bare(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(out / "log.txt", "w") as log:
        done = subprocess.run(
            [sys.executable, __file__, "--ray-tune", "--child", "--out", str(out)], stdout=log, stderr=subprocess.STDOUT
        )
    exited = time.time()
    if done.returncode != 0:
        raise SystemExit(f"bare Ray Tune failed ({done.returncode}); see {out / 'log.txt'}")
    inner = json.loads((out / "child.json").read_text())
    first_start, last_end = inner["span"]
    fit_start, fit_end = inner["fit"]
    parts = {
        "interpreter and imports (Ray, Tune)": inner["imported"] - started,
        "ray.init": inner["marks"]["ray.init"],
        "Tune's set-up until the first trial starts": first_start - fit_start,
        "last trial end until fit returns": fit_end - last_end,
        "ray.shutdown": inner["marks"]["ray.shutdown"],
        "interpreter exit": exited - inner["ended"],
    }
    wall, span = exited - started, last_end - first_start
    report = {"wall_s": wall, "trials_span_s": span, "fixed_s": wall - span, "parts_s": parts}
    (out / "results.json").write_text(json.dumps(report, indent=2))
    lines = ["| part (bare Ray Tune) | s |", "|---|---:|"]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in parts.items()]
    lines.append(f"| **fixed cost** (wall less the trials' span) | **{wall - span:.1f}** |")
    print("\n".join(lines) + f"\n\nwall {wall:.1f} s, trials' span {span:.1f} s")


def outside(out: Path, experiment: str, overrides: list[str], runs: int) -> None:
    """``python -m tuner sweep`` as a user runs it, ``runs`` times: wall less the trials' span."""
    from tuner.folder.records import read_timeline
    from tuner.folder.store import SweepFolder

    fixed = []
    for index in range(runs):
        folder = out / f"run-{index + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tuner", "sweep", experiment]
        for override in [*overrides, f"output_dir={folder / 'runs'}"]:
            command += ["--set", override]
        started = time.time()
        with open(folder / "log.txt", "w") as log:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        wall = time.time() - started
        if done.returncode != 0:
            raise SystemExit(f"the sweep failed ({done.returncode}); see {folder / 'log.txt'}")
        sweep_dir = next(p.parents[1] for p in (folder / "runs").glob("*/best/metrics.json"))
        events = read_timeline(SweepFolder(sweep_dir))
        span = max(e["time"] for e in events if e["event"] in ("end", "error")) - min(
            e["time"] for e in events if e["event"] == "start"
        )
        fixed.append({"wall_s": wall, "trials_span_s": span, "fixed_s": wall - span})
        print(
            f"run {index + 1}: wall {wall:.1f} s, trials' span {span:.1f} s, fixed cost {wall - span:.1f} s", flush=True
        )
    (out / "results.json").write_text(json.dumps({"outside": fixed}, indent=2))
    print(f"fixed cost, median of {runs}: {statistics.median(r['fixed_s'] for r in fixed):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", nargs="?", default="mnist_asha.yaml")
    parser.add_argument("overrides", nargs="*", help="key=value, as tuner sweep takes them")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ray-tune", action="store_true", help="bare Ray Tune, the same command shape")
    parser.add_argument("--outside", action="store_true", help="tuner's command untouched, timed from outside only")
    parser.add_argument("--runs", type=int, default=1, help="with --outside: how many sweeps, one after another")
    args = parser.parse_args()
    out = Path(args.out or REPO / "benchmarks" / "results" / f"fixed-cost-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if args.ray_tune:
        bare_child(out) if args.child else bare(out)
        return
    if args.outside:
        outside(out, args.experiment, args.overrides, args.runs)
        return
    argv = [args.experiment]
    for override in [*args.overrides, f"output_dir={out / 'runs'}"]:
        argv += ["--set", override]
    if args.child:
        child(out, argv)
        return
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, __file__, "--child", "--out", str(out), args.experiment, *args.overrides]
    started = time.time()
    with open(out / "log.txt", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    exited = time.time()
    (out / "parent.json").write_text(json.dumps({"started": started, "exited": exited}))
    if done.returncode != 0:
        raise SystemExit(f"the sweep failed ({done.returncode}); see {out / 'log.txt'}")
    report = summarise(out, started, exited)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    print(table(report))


def summarise(out: Path, started: float, exited: float) -> dict:
    from tuner.folder.records import read_timeline, trial_histories
    from tuner.folder.store import SweepFolder

    inner = json.loads((out / "child.json").read_text())
    sweep_dir = next(p.parents[1] for p in (out / "runs").glob("*/best/metrics.json"))
    folder = SweepFolder(sweep_dir)
    events = read_timeline(folder)
    starts = [e["time"] for e in events if e["event"] == "start"]
    ends = [e["time"] for e in events if e["event"] in ("end", "error")]
    first_start, last_end = min(starts), max(ends)
    marks = {label: sum(b - a for a, b in spans) for label, spans in inner["marks"].items()}
    fit_start, fit_end = inner["marks"]["Tune fit"][0]
    mlflow_open = inner["marks"]["open the MLflow store"][0]
    parts = {
        "interpreter and imports (tuner, Ray, Tune)": inner["imported"] - started,
        "read the data": marks.get("read the data", 0.0),
        "ray.init": marks["ray.init"],
        "data ready in Ray": marks.get("data ready in Ray", 0.0),
        "Tune's set-up until the first trial starts": first_start - fit_start,
        "last trial end until fit returns": fit_end - last_end,
        "export (test score, model files)": marks["export (test score, model files)"],
        "log and register the model in MLflow (and reopen the store)": marks["log and register the model in MLflow"]
        + sum(b - a for a, b in inner["marks"]["open the MLflow store"][1:]),
        "ray.shutdown": marks.get("ray.shutdown", 0.0),  # none when it joined a Ray it did not start
        "summary printed, interpreter exit": exited - inner["ended"],
    }
    wall = exited - started
    span = last_end - first_start
    parts["other (config, claiming the folder, between the steps)"] = wall - span - sum(parts.values())
    histories = trial_histories(folder)
    later = [row["images_per_s"] for rows in histories.values() for row in rows[1:]]
    best = json.loads((sweep_dir / "best" / "metrics.json").read_text())
    return {
        # On the MLflow callback's writer thread (tracking/callbacks.py), while Tune starts the
        # first trials: not a part of its own.
        "mlflow_store_open_s": mlflow_open[1] - mlflow_open[0],
        "wall_s": wall,
        "trials_span_s": span,
        "fixed_s": wall - span,
        "parts_s": parts,
        "tuning_s": fit_end - fit_start,
        "epochs_run": sum(len(rows) for rows in histories.values()),
        "trials": len(histories),
        "median_images_per_s_after_first_epoch": statistics.median(later) if later else None,
        "best_val_accuracy": best["val_accuracy"],
        "test_accuracy": best["test_accuracy"],
        "best_hyperparameters": best.get("hyperparameters"),
    }


def table(report: dict) -> str:
    lines = ["| part | s |", "|---|---:|"]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in report["parts_s"].items()]
    lines.append(f"| **fixed cost** (wall less the trials' span) | **{report['fixed_s']:.1f}** |")
    lines.append(
        f"\n(the MLflow store opened on the writer thread in {report['mlflow_store_open_s']:.1f} s, "
        "while Tune started the first trials)"
    )
    throughput = report["median_images_per_s_after_first_epoch"]
    lines += [
        "",
        f"wall {report['wall_s']:.1f} s, trials' span {report['trials_span_s']:.1f} s, Tune's fit "
        f"{report['tuning_s']:.1f} s; {report['trials']} trials, {report['epochs_run']} epochs; "
        f"best val {report['best_val_accuracy']:.4f}, test {report['test_accuracy']:.4f}; "
        + (f"median {throughput:.0f} img/s per trial after its first epoch" if throughput else ""),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
