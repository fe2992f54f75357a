"""How tuner's own cost grows with trials and results, against bare Ray Tune and Optuna.

    python benchmarks/studies/scaling.py                                  # 10, 100, 1000 trials x 10 results (~20 min)
    python benchmarks/studies/scaling.py --trials 10 --trials 100         # fewer sizes
    python benchmarks/studies/scaling.py --schedulers                     # ASHA, HyperBand, PBT at scale (~5 min)

Every contestant runs the same synthetic trial (tuner/trial/synthetic.py): each epoch sleeps
``--epoch-s`` and reports a known noisy learning curve of ``lr`` (log-uniform, random
search), 10 epochs, no scheduler, two trials at a time on a 2-core machine:

- ``tuner``: ``python -m tuner sweep`` with ``model: {name: synthetic}``: Tune, the
  history, MLflow's nested runs (sqlite), TensorBoard, a checkpoint every epoch, the
  export and the registered model; then ``status``, ``best`` and ``report`` on its folder,
  each a fresh command as a user types it.
- ``ray_tune``: a bare function trainable calling the same curve, ``tune.report`` per
  epoch, ``reuse_actors=True`` (Tune's knob for many short trials), Tune's defaults
  otherwise (its JSON/CSV/TensorBoard loggers, no checkpoints).
- ``ray_tune_checkpoints``: the same, saving a checkpoint every epoch as tuner does (a
  small file through ``tune.report(..., checkpoint=...)``): what Tune itself costs for
  the checkpoints, apart from tuner's records.
- ``optuna``: one in-process study, ``n_jobs=2``, ``trial.report`` per epoch, the same
  curve (no storage: Optuna's in-memory default).

Each runs as a child process; this script measures its wall time and the peak memory
(PSS) of its whole process tree. The child itself reports its CPU time and peak RSS
(the driver), and the per-trial records: a result's cycle is the wall time between
two reports of a trial (``epoch_s`` is the floor; both as the trial made them: tuner's
by the history's ``time_total_s``, since a trial that keeps its own checkpoints sends Tune
its short epochs together), a trial's overhead is the slot time not spent
inside trials, and the fixed cost is the wall time outside the first trial's start
.. the last trial's end. Writes ``results.json`` and ``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
sys.path.insert(0, str(REPO / "benchmarks"))  # run.py (TreeMemory)
EPOCHS = 10
SLOTS = 2
LR_RANGE = (1e-4, 1e-1)


# --- the contestants (each runs in a child process: --child NAME) -----------------------


def sweep_yaml(folder: Path, trials: int, epoch_s: float, scheduler: dict | None = None, seed: int = 0) -> Path:
    import yaml

    sweep = {
        "name": "synthetic",
        "output_dir": str(folder / "runs"),
        "seed": seed,
        "data": {"dataset": "synthetic"},
        "model": {"name": "synthetic", "epoch_s": epoch_s},
        "train": {"epochs": EPOCHS},
        "space": {"params": {"lr": {"loguniform": list(LR_RANGE)}}},
        "searcher": {"name": "random"},
        "scheduler": scheduler or {"name": "fifo"},
        "trials": {"num_samples": trials},
        "scaling": {"workers": 1, "cpus_per_worker": 1},
        "tracking": {"mlflow": {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}"}},
    }
    path = folder / "synthetic.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def child_tuner(folder: Path, trials: int, epoch_s: float) -> dict:
    """The sweep in this process (so that its CPU, memory and MLflow calls are this
    process's), then the read commands as fresh processes."""
    from tuner import cli
    from tuner.folder.records import trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.tracking import mlflow_store

    spent = {"s": 0.0, "calls": 0, "depth": 0}
    plain = mlflow_store.retrying

    def timed(call, *args, **kwargs):  # every MLflow call tuner makes goes through here
        spent["depth"] += 1
        started = time.perf_counter()
        try:
            return plain(call, *args, **kwargs)
        finally:
            spent["depth"] -= 1
            if spent["depth"] == 0:
                spent["s"] += time.perf_counter() - started
                spent["calls"] += 1

    mlflow_store.retrying = timed
    from tuner.tracking import writer

    writer_cpu: list[float] = []  # the MLflow writer process's CPU (its calls are its own)
    plain_close = writer.WriterProcess.close

    def close(self):
        try:
            plain_close(self)
        finally:
            writer_cpu.append(self.cpu_s or 0.0)

    writer.WriterProcess.close = close
    path = sweep_yaml(folder, trials, epoch_s)
    code = cli.main(["sweep", str(path)])
    if code != 0:
        raise SystemExit(f"tuner sweep exited {code}")
    sweep_dir = folder / "runs" / "synthetic"
    rows = trial_histories(SweepFolder(sweep_dir))
    records = [
        {
            "entered": r[0]["entered_at"],
            "ended": r[-1]["reported_at"],
            # the trial's clock (Tune's time_total_s, also for the epochs a trial held back and
            # sent with a later one: the driver has those together)
            "cycles": _cycles([row["time_total_s"] for row in r]),
            "inside_s": r[-1]["reported_at"] - r[0]["entered_at"],
            "best": max(row["val_accuracy"] for row in r),
        }
        for r in rows.values()
    ]
    reads = {}
    for command in ("status", "best", "report"):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tuner", command, str(sweep_dir)], capture_output=True, text=True)
        reads[command] = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"tuner {command} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return {
        "trials": records,
        "mlflow_write_s": spent["s"],
        "mlflow_calls": spent["calls"],
        "mlflow_writer_cpu_s": sum(writer_cpu),
        "store_mb": (_size(folder / "mlflow.db") + _size(sweep_dir)) / 2**20,
        "mlflow_db_mb": _size(folder / "mlflow.db") / 2**20,
        "read_commands_s": reads,
    }


def child_ray_tune(folder: Path, trials: int, epoch_s: float, checkpoints: bool = False) -> dict:
    import tempfile

    import ray
    from ray import tune

    from tuner.trial import synthetic

    def objective(config: dict) -> None:
        entered, skill = time.time(), 0.0
        for epoch in range(1, EPOCHS + 1):
            time.sleep(epoch_s)
            skill = synthetic.step(skill, config["lr"])
            accuracy, loss = synthetic.observe(skill, 0.005, config["seed"], epoch)
            metrics = {"val_accuracy": accuracy, "val_loss": loss, "entered_at": entered, "sent_at": time.time()}
            if not checkpoints:
                tune.report(metrics)
                continue
            with tempfile.TemporaryDirectory() as state:  # as Ray's guide saves one, every epoch
                Path(state, "state.json").write_text(json.dumps({"skill": skill, "epoch": epoch}))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(state))

    ray.init(include_dashboard=True, dashboard_host="127.0.0.1")
    try:
        grid = tune.Tuner(
            objective,
            param_space={"lr": tune.loguniform(*LR_RANGE), "seed": tune.randint(0, 1_000_000)},
            # reuse_actors: Tune's own knob for many short trials (without it, a fresh
            # process per trial: about 3 s each here); the stronger opponent.
            tune_config=tune.TuneConfig(num_samples=trials, metric="val_accuracy", mode="max", reuse_actors=True),
            run_config=tune.RunConfig(name="synthetic", storage_path=str(folder / "ray_results"), verbose=0),
        ).fit()
        records = []
        for result in grid:
            frame = result.metrics_dataframe
            records.append(
                {
                    "entered": float(frame["entered_at"].iloc[0]),
                    "ended": float(frame["sent_at"].iloc[-1]),
                    "cycles": _cycles(list(frame["sent_at"])),
                    "inside_s": float(frame["sent_at"].iloc[-1] - frame["entered_at"].iloc[0]),
                    "best": float(frame["val_accuracy"].max()),
                }
            )
    finally:
        ray.shutdown()
    return {"trials": records, "store_mb": _size(folder / "ray_results") / 2**20}


def child_optuna(folder: Path, trials: int, epoch_s: float) -> dict:
    import optuna

    from tuner.trial import synthetic

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    records = []

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", *LR_RANGE, log=True)
        entered, skill, best, stamps = time.time(), 0.0, 0.0, [0.0]
        for epoch in range(1, EPOCHS + 1):
            time.sleep(epoch_s)
            skill = synthetic.step(skill, lr)
            accuracy, _ = synthetic.observe(skill, 0.005, trial.number, epoch)
            trial.report(accuracy, epoch)
            best = max(best, accuracy)
            stamps.append(time.time() - entered)
        records.append(
            {
                "entered": entered,
                "ended": entered + stamps[-1],
                "cycles": _cycles(stamps),
                "inside_s": stamps[-1],
                "best": best,
            }
        )
        return accuracy

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=trials, n_jobs=SLOTS)
    return {"trials": records, "store_mb": 0.0}


def child_ray_tune_checkpoints(folder: Path, trials: int, epoch_s: float) -> dict:
    return child_ray_tune(folder, trials, epoch_s, checkpoints=True)


CHILDREN = {
    "tuner": child_tuner,
    "ray_tune": child_ray_tune,
    "ray_tune_checkpoints": child_ray_tune_checkpoints,
    "optuna": child_optuna,
}


# --- the schedulers at scale, against what their papers say ---------------------------

SCHEDULER_RUNS = {
    # ASHA (Li et al. 2020): with reduction factor eta, about 1/eta of the trials at a rung
    # go on to the next (asynchronous promotion lets a few more through early).
    "asha": ({"name": "asha", "grace_period": 1, "reduction_factor": 2}, 256),
    # HyperBand (Li et al. 2018): brackets of successive halving, from many short trials
    # to a few run to max_t from the start.
    "hyperband": ({"name": "hyperband", "reduction_factor": 3}, 81),
    # PBT (Jaderberg et al. 2017): the population's weak exploit the strong (copy their
    # state) and explore (perturb lr); the learning rates move towards the best.
    "pbt": ({"name": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.25}, 16),
}


def scheduler_check(name: str, folder: Path, epoch_s: float) -> dict:
    """One synthetic sweep under a scheduler; what its trials did, rung by rung."""
    import yaml

    from tuner.folder.records import trial_histories
    from tuner.folder.store import SweepFolder
    from tuner.trial.synthetic import OPTIMUM_LR

    scheduler, trials = SCHEDULER_RUNS[name]
    folder.mkdir(parents=True, exist_ok=True)
    path = sweep_yaml(folder, trials, epoch_s, scheduler)
    if name == "hyperband":  # max_t = 9 epochs: rungs at 1, 3, 9 for eta = 3
        sweep = yaml.safe_load(path.read_text())
        sweep["train"]["epochs"] = 9
        path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    print(f"--- scheduler {name}: {trials} synthetic trials", flush=True)
    started = time.perf_counter()
    with open(folder / "log.txt", "w") as log:
        done = subprocess.run([sys.executable, "-m", "tuner", "sweep", str(path)], stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"the {name} sweep failed; see {folder / 'log.txt'}")
    histories = trial_histories(SweepFolder(folder / "runs" / "synthetic"))
    epochs = [max(row["training_iteration"] for row in rows) for rows in histories.values()]
    reached = {e: sum(1 for n in epochs if n >= e) for e in sorted(set(epochs))}
    result = {"trials": len(histories), "wall_s": time.perf_counter() - started, "trials_reaching_epoch": reached}
    best = max(max(row["val_accuracy"] for row in rows) for rows in histories.values())
    result["best_val_accuracy"] = best
    if name == "pbt":
        import math

        def spread(rows_at: list[float]) -> float:  # mean decades from the optimum
            return statistics.mean(abs(math.log10(lr) - math.log10(OPTIMUM_LR)) for lr in rows_at)

        result["lr_decades_from_optimum_first_epoch"] = spread([rows[0]["lr"] for rows in histories.values()])
        result["lr_decades_from_optimum_last_epoch"] = spread([rows[-1]["lr"] for rows in histories.values()])
        starts = {
            (row["trial_id"], row["entered_at"], row.get("resumed_from")) for rows in histories.values() for row in rows
        }
        result["exploits"] = sum(1 for trial_id, _, donor in starts if donor and donor != trial_id)
    print(f"    {json.dumps(result)}", flush=True)
    return result


def _all_busy(records: list[dict]) -> float:
    """Seconds in which ``SLOTS`` trials ran at once."""
    events = sorted([(r["entered"], 1) for r in records] + [(r["ended"], -1) for r in records])
    running, busy, since = 0, 0.0, 0.0
    for when, change in events:
        if running >= SLOTS:
            busy += when - since
        running, since = running + change, when
    return busy


def _cycles(totals: list[float]) -> list[float]:
    """Seconds between consecutive reports, from their times."""
    return [later - earlier for earlier, later in zip(totals, totals[1:], strict=False)]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run_child(name: str, folder: Path, trials: int, epoch_s: float) -> None:
    started = time.perf_counter()
    result = CHILDREN[name](folder, trials, epoch_s)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result.update(
        child_wall_s=time.perf_counter() - started,
        driver_cpu_s=usage.ru_utime + usage.ru_stime,
        driver_peak_rss_mb=usage.ru_maxrss / 1024,
    )
    (folder / "result.json").write_text(json.dumps(result))


# --- the parent: run, measure, compare -------------------------------------------------


def measure(name: str, folder: Path, trials: int, epoch_s: float) -> dict:
    from run import TreeMemory

    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--child", name, "--trials", str(trials), "--epoch-s", str(epoch_s)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")])}
    print(f"--- {name}, {trials} trials x {EPOCHS} results", flush=True)
    started = time.perf_counter()
    with open(folder / "log.txt", "w") as log:
        process = subprocess.Popen([*command, "--out", str(folder)], stdout=log, stderr=subprocess.STDOUT, env=env)
        # Every 2 s: reading each process's smaps every 0.5 s cost 14 s of CPU in a 65 s run of
        # 300 trials (9 s in bare Ray Tune's: fewer, smaller processes), on the same 2 cores.
        memory = TreeMemory(process.pid, interval=2.0)
        code = process.wait()
        memory.stop()
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name} failed with exit code {code}; see {folder / 'log.txt'}")
    raw = json.loads((folder / "result.json").read_text())
    wall -= sum(raw.get("read_commands_s", {}).values())  # tuner's status/best/report, timed on their own
    return summarise(raw, wall, memory.peak_pss / 2**20, trials, epoch_s)


def summarise(raw: dict, wall: float, peak_pss_mb: float, trials: int, epoch_s: float) -> dict:
    records = raw.pop("trials")
    if len(records) != trials:
        raise SystemExit(f"expected {trials} trials, got {len(records)}")
    cycles = [c for r in records for c in r["cycles"]]
    span = max(r["ended"] for r in records) - min(r["entered"] for r in records)
    inside = sum(r["inside_s"] for r in records)
    floor = trials * EPOCHS * epoch_s / SLOTS
    return {
        **raw,
        "trials": trials,
        "wall_s": wall,
        "floor_s": floor,
        "span_s": span,
        "fixed_s": wall - span,
        "overhead_per_trial_ms": 1000 * (wall - floor) / trials,
        "overhead_per_result_ms": 1000 * (wall - floor) / (trials * EPOCHS),
        "result_cycle_overhead_ms": 1000 * (statistics.median(cycles) - epoch_s) if cycles else 0.0,
        "between_trials_ms": 1000 * max(0.0, span * SLOTS - inside) / trials,
        "all_slots_busy": _all_busy(records) / span if span else 0.0,
        "best_val_accuracy": max(r["best"] for r in records),
        "peak_pss_mb": peak_pss_mb,
    }


def table(results: dict[str, dict[int, dict]]) -> str:
    lines = [
        "| contestant | trials | wall s | floor s | fixed s | overhead / trial ms | result cycle - sleep ms | "
        "gap between trials ms | all slots busy | driver CPU s | driver peak RSS MB | tree peak PSS MB | "
        "store MB | best val |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by_size in results.items():
        for trials, r in sorted(by_size.items()):
            lines.append(
                f"| {name} | {trials} | {r['wall_s']:.1f} | {r['floor_s']:.1f} | {r['fixed_s']:.1f} | "
                f"{r['overhead_per_trial_ms']:.0f} | {r['result_cycle_overhead_ms']:.1f} | "
                f"{r['between_trials_ms']:.0f} | {r.get('all_slots_busy', float('nan')):.0%} | "
                f"{r['driver_cpu_s']:.1f} | {r['driver_peak_rss_mb']:.0f} | {r['peak_pss_mb']:.0f} | "
                f"{r['store_mb']:.1f} | {r['best_val_accuracy']:.4f} |"
            )
    tuner = results.get("tuner", {})
    extra = [
        f"- tuner, {n} trials: MLflow's writer process {r.get('mlflow_writer_cpu_s', 0.0):.1f} s of CPU; "
        f"the driver's own MLflow calls {r['mlflow_write_s']:.1f} s in {r['mlflow_calls']} "
        f"(sqlite {r['mlflow_db_mb']:.1f} MB); status {r['read_commands_s']['status']:.2f} s, "
        f"best {r['read_commands_s']['best']:.2f} s, report {r['read_commands_s']['report']:.2f} s"
        for n, r in sorted(tuner.items())
    ]
    lone = [
        f"- {name}, {n} trials: {SLOTS} trials ran at once for only {r['all_slots_busy']:.0%} of the span. "
        "Tune gave each trial a finished trial's process while the other slot's was still starting, "
        "and dropped the one starting (docs/ray-notes.md): not the machinery's cost; run it again"
        for name, by_size in results.items()
        for n, r in sorted(by_size.items())
        if r.get("all_slots_busy", 1.0) < 0.5
    ]
    ratios = []
    for name in ("ray_tune", "ray_tune_checkpoints", "optuna"):
        for n in sorted(set(tuner) & set(results.get(name, {}))):
            ours, theirs = tuner[n], results[name][n]
            ratios.append(
                f"- {n} trials: tuner's overhead per trial {ours['overhead_per_trial_ms']:.0f} ms = "
                f"{ours['overhead_per_trial_ms'] / max(theirs['overhead_per_trial_ms'], 1e-9):.2f}x {name}'s; "
                f"wall {ours['wall_s'] / theirs['wall_s']:.2f}x"
            )
    return "\n".join(lines + [""] + extra + [""] + lone + ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, action="append", help="default: 10, 100, 1000")
    parser.add_argument("--epoch-s", type=float, default=0.01, help="each synthetic epoch sleeps this long")
    parser.add_argument("--only", action="append", choices=list(CHILDREN))
    parser.add_argument("--out", default=None)
    parser.add_argument("--schedulers", action="store_true", help="only ASHA, HyperBand and PBT at scale")
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, Path(args.out), args.trials[0], args.epoch_s)
        if args.child == "tuner":  # it ends as `python -m tuner sweep` does; the others as plain scripts
            from tuner.cli import leave

            leave(0)
        return
    out = Path(args.out or REPO / "benchmarks" / "results" / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if args.schedulers:
        checks = {name: scheduler_check(name, out / f"scheduler-{name}", args.epoch_s) for name in SCHEDULER_RUNS}
        (out / "schedulers.json").write_text(json.dumps(checks, indent=2))
        print(f"\nwritten: {out / 'schedulers.json'}")
        return
    sizes = args.trials or [10, 100, 1000]
    results: dict[str, dict[int, dict]] = {}
    for trials in sizes:
        for name in args.only or list(CHILDREN):
            results.setdefault(name, {})[trials] = measure(name, out / f"{name}-{trials}", trials, args.epoch_s)
            r = results[name][trials]
            print(
                f"    wall {r['wall_s']:.1f} s, overhead {r['overhead_per_trial_ms']:.0f} ms/trial, "
                f"cycle +{r['result_cycle_overhead_ms']:.1f} ms/result",
                flush=True,
            )
    markdown = table(results)
    print(markdown)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"epoch_s": args.epoch_s, "results": results}, indent=2))
    (out / "results.md").write_text(f"epoch_s = {args.epoch_s}, {EPOCHS} results per trial\n\n{markdown}\n")
    print(f"\nwritten: {out / 'results.md'}")


if __name__ == "__main__":
    main()
