"""What tuner adds to an Optuna objective run unchanged (``objective: module:function``),
against the same objective in an in-process Optuna study, side by side (issue 41).

    python benchmarks/studies/objective_overhead.py                         # 100 trials, 2 variants, 2 rounds (~4 min)
    python benchmarks/studies/objective_overhead.py --trials 20 --rounds 1  # a quick look

One trivial objective (a float, an int, a categorical and, under one of its values, a
conditional float; a quadratic returned), in two variants: ``plain``, and ``reports``,
which also calls ``trial.report`` 3 times. Each is run, in turns and each in a child
process of its own, by:

- ``optuna``: ``optuna.create_study(sampler=TPESampler(seed=0)).optimize(objective,
  n_trials=N)``, in memory, one trial after another (Optuna's defaults);
- ``optuna_journal``: the same study kept in a ``JournalStorage`` file, as tuner keeps its
  study (``study.journal``): what the storage costs, apart from Ray;
- ``tuner``: ``python -m tuner sweep`` with ``searcher: {name: optuna, sampler: tpe,
  n_startup_trials: 10}`` (Optuna's TPE, as Optuna sets it up), everything recorded
  (history, timeline, MLflow's nested runs in sqlite, TensorBoard, the export), two
  trials at a time on 2 cores. Its child times tuner's steps from inside, as
  ``fixed_cost.py`` does: the imports, ``ray.init``, starting the study's actor, Tune's
  set-up until the first trial starts, the trials' span (the timeline's first start ..
  last end), the rest of ``fit``, the export and MLflow's last writes, ``ray.shutdown``.

The objective itself times each ``trial.suggest_*`` and ``trial.report`` call and the
whole call (``time.perf_counter``) and appends them to a file: in tuner a suggest is a
round trip to the study's actor, in Optuna a method call. Prints, per variant, each
contestant's wall time (the whole child process, and the study alone: Optuna's
``create_study`` + ``optimize``, tuner's trials' span), milliseconds per trial, tuner /
Optuna, the fixed cost (tuner's wall less its trials' span), the mean suggest and report
call, a trial's life in tuner step by step, and the best value each found; the median
over ``--rounds``. Last, a bare Ray actor call from a 1-CPU task (no study behind it),
what a suggest's round trip cannot go below. Writes ``results.json`` and ``results.md``
under ``--out`` (by default ``benchmarks/results/objective-<time>/``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
VARIANTS = {"plain": 0, "reports": 3}  # name -> trial.report calls per trial
CONTESTANTS = ("optuna", "optuna_journal", "tuner")
STARTUP_TRIALS = 10  # Optuna's TPESampler default; tuner's optuna searcher defaults to 4
SLOTS = 2  # tuner's trials at once on 2 cores (1 CPU each)

OBJECTIVE = """
import json
import time

TIMINGS = {timings!r}
REPORTS = {reports}


def objective(trial):
    entered = time.perf_counter()
    suggest_s = []

    def suggested(call, *args):
        started = time.perf_counter()
        value = call(*args)
        suggest_s.append(time.perf_counter() - started)
        return value

    x = suggested(trial.suggest_float, "x", -4.0, 4.0)
    y = suggested(trial.suggest_int, "y", 0, 5)
    kind = suggested(trial.suggest_categorical, "kind", ["plain", "shifted"])
    shift = suggested(trial.suggest_float, "shift", 0.0, 1.0) if kind == "shifted" else 0.0
    value = (x - 1.0) ** 2 + y + shift
    report_s = []
    for step in range(REPORTS):
        started = time.perf_counter()
        trial.report(value + REPORTS - step, step)
        report_s.append(time.perf_counter() - started)
    with open(TIMINGS, "a") as out:
        line = {{"suggest_s": suggest_s, "report_s": report_s, "inside_s": time.perf_counter() - entered}}
        out.write(json.dumps(line) + "\\n")
    return value
"""


def write_objective(folder: Path, reports: int) -> Path:
    """The objective's module (``study.py``) in ``folder``; its timings go to ``timings.jsonl``."""
    folder.mkdir(parents=True, exist_ok=False)  # a fresh folder: the timings are appended
    (folder / "study.py").write_text(OBJECTIVE.format(timings=str(folder / "timings.jsonl"), reports=reports))
    return folder / "timings.jsonl"


# --- the contestants (each runs in a child process: --child NAME) -----------------------


def child_optuna(folder: Path, trials: int, journal: bool = False) -> dict:
    started = time.perf_counter()
    import optuna
    from optuna.samplers import TPESampler

    sys.path.insert(0, str(folder))
    from study import objective

    imported = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = None
    if journal:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    study = optuna.create_study(storage=storage, sampler=TPESampler(seed=0))
    study.optimize(objective, n_trials=trials)
    finished = time.perf_counter()
    return {
        "imports_s": imported - started,
        "study_s": finished - imported,  # create_study + optimize
        "best_value": study.best_value,
        "completed": len(study.trials),
    }


def child_optuna_journal(folder: Path, trials: int) -> dict:
    return child_optuna(folder, trials, journal=True)


def child_tuner(folder: Path, trials: int) -> dict:
    """The sweep, in this process as ``python -m tuner sweep`` runs it, its steps timed."""
    marks: dict[str, list[tuple[float, float]]] = {}
    began = time.time()
    import ray
    import yaml
    from ray import tune

    from tuner import cli
    from tuner.driver import sweep as sweep_module
    from tuner.search import define_by_run

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

    timed(sweep_module, "start_ray", "ray.init")
    timed(define_by_run, "start", "the study's actor")
    timed(tune.Tuner, "fit", "Tune fit")
    timed(ray, "shutdown", "ray.shutdown")
    sweep = {
        "name": "objective",
        "objective": "study:objective",
        "mode": "min",
        "output_dir": str(folder / "runs"),
        "searcher": {"name": "optuna", "sampler": "tpe", "n_startup_trials": STARTUP_TRIALS},
        "trials": {"num_samples": trials},
        "tracking": {"mlflow": {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}", "registry": False}},
    }
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    code = cli.main(["sweep", str(path)])
    if code != 0:
        raise SystemExit(f"tuner sweep exited {code}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    return {"began": began, "imported": imported, "ended": time.time(), "marks": marks, "driver_cpu_s": cpu}


def child_round_trip(folder: Path, calls: int) -> dict:
    """A bare Ray actor call from a trial-like process: a 1-CPU task calls a no-op method of
    a 0-CPU actor ``calls`` times, as a trial calls the study's actor (without the study)."""
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, value: float) -> float:
            return value

    @ray.remote(num_cpus=1)
    def caller(echo, calls: int) -> list[float]:
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            ray.get(echo.echo.remote(1.0))
            seconds.append(time.perf_counter() - started)
        return seconds

    ray.init(num_cpus=SLOTS, include_dashboard=False, logging_level="ERROR")
    try:
        echo = Echo.remote()
        ray.get(caller.remote(echo, 20))  # the worker and the actor up, their first calls made
        seconds = sorted(ray.get(caller.remote(echo, calls)))
    finally:
        ray.shutdown()
    return {"calls": calls, "median_ms": 1000 * seconds[calls // 2], "p90_ms": 1000 * seconds[int(calls * 0.9)]}


CHILDREN = {
    "optuna": child_optuna,
    "optuna_journal": child_optuna_journal,
    "tuner": child_tuner,
    "round_trip": child_round_trip,
}


def run_child(name: str, folder: Path, trials: int) -> None:
    result = CHILDREN[name](folder, trials)
    (folder / "result.json").write_text(json.dumps(result))


# --- the parent: run, measure, compare -------------------------------------------------


def measure(name: str, variant: str, trials: int, keep: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"objective-{name}-") as temporary:
        folder = (keep / f"{name}-{variant}") if keep else Path(temporary) / "run"
        timings = write_objective(folder, VARIANTS[variant])
        command = [sys.executable, __file__, "--child", name, "--trials", str(trials), "--out", str(folder)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        load_before, started = os.getloadavg()[0], time.time()
        with open(folder / "log.txt", "w") as log:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder)
        exited = time.time()
        if done.returncode != 0:
            tail = (folder / "log.txt").read_text()[-800:]
            raise SystemExit(f"{name} ({variant}) exited {done.returncode}:\n{tail}")
        raw = json.loads((folder / "result.json").read_text())
        calls = [json.loads(line) for line in timings.read_text().splitlines()]
        # The machine's load (1-minute average) before and after: other work on it shows here.
        result = {"wall_s": exited - started, "load": [load_before, os.getloadavg()[0]], **_calls(calls)}
        if name == "tuner":
            result.update(_tuner_parts(folder, raw, started, exited))
        else:
            result.update(raw)
        if result["completed"] != trials or len(calls) != trials:
            raise SystemExit(f"{name} ({variant}): {result['completed']} trials completed, {len(calls)} timed")
        result["per_trial_ms"] = 1000 * result["wall_s"] / trials
        result["study_per_trial_ms"] = 1000 * result["study_s"] / trials
        return result


def round_trip(calls: int = 500) -> dict:
    """The bare actor call (``child_round_trip``), in a child process of its own."""
    with tempfile.TemporaryDirectory(prefix="objective-round-trip-") as folder:
        command = [sys.executable, __file__, "--child", "round_trip", "--trials", str(calls), "--out", folder]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"round_trip exited {done.returncode}: {done.stderr.strip()[-500:]}")
        return json.loads((Path(folder) / "result.json").read_text())


def _calls(calls: list[dict]) -> dict:
    """The objective's own timings: per call of ``suggest_*`` and ``report``, the mean (in
    Optuna the sampler's work falls on a trial's first suggest: a median would hide it), and
    per trial, the median over trials."""
    suggests = [s for call in calls for s in call["suggest_s"]]
    reports = [s for call in calls for s in call["report_s"]]
    return {
        "suggests": len(suggests),
        "suggest_mean_ms": 1000 * statistics.mean(suggests),
        "suggests_per_trial_ms": 1000 * statistics.median(sum(call["suggest_s"]) for call in calls),
        "report_mean_ms": 1000 * statistics.mean(reports) if reports else None,
        "inside_median_ms": 1000 * statistics.median(call["inside_s"] for call in calls),
    }


def _tuner_parts(folder: Path, raw: dict, started: float, exited: float) -> dict:
    """Where tuner's wall time went, from the child's marks and the sweep's own records."""
    import optuna

    from tuner.folder.records import read_timeline, trial_histories
    from tuner.folder.store import SweepFolder

    root = folder / "runs" / "objective"
    events = read_timeline(SweepFolder(root))
    starts = [e["time"] for e in events if e["event"] == "start"]
    ends = [e["time"] for e in events if e["event"] in ("end", "error")]
    first_start, last_end = min(starts), max(ends)
    marks = raw["marks"]
    fit_start, fit_end = marks["Tune fit"][0]
    (ray_start, ray_up), (study_start, study_up) = marks["ray.init"][0], marks["the study's actor"][0]
    shutdown_start, shutdown_end = marks["ray.shutdown"][-1]
    parts = {
        "interpreter and imports": raw["imported"] - started,
        "sweep file, folder, until ray.init": ray_start - raw["imported"],
        "ray.init": ray_up - ray_start,
        "until Tune's fit (the study's actor in it)": fit_start - ray_up,
        "Tune's set-up until the first trial starts": first_start - fit_start,
        "the trials' span": last_end - first_start,
        "last trial end until fit returns": fit_end - last_end,
        "export and MLflow's last writes": shutdown_start - fit_end,
        "ray.shutdown": shutdown_end - shutdown_start,
        "summary printed, interpreter exit": exited - raw["ended"],
    }
    parts["other"] = (exited - started) - sum(parts.values())
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(root / "study.journal")))
    study = optuna.load_study(study_name="objective", storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    per_trial = _per_trial(events, trial_histories(SweepFolder(root)), complete, last_end - first_start)
    exported = json.loads((root / "best" / "metrics.json").read_text())
    return {
        "parts_s": parts,
        "study_actor_start_s": study_up - study_start,
        "study_s": last_end - first_start,  # the trials' span: the part that grows with trials
        "fixed_s": (exited - started) - (last_end - first_start),
        "trials_at_once": SLOTS,
        "driver_cpu_s": raw["driver_cpu_s"],
        "trial_life_ms": per_trial,
        "best_value": study.best_value,
        "exported_best_value": exported.get("value"),
        "completed": len(complete),
    }


def _per_trial(events: list[dict], histories: dict[str, list[dict]], study_trials: list, span: float) -> dict:
    """A trial's life in milliseconds (medians over trials), from the driver's timeline (Tune's
    callbacks), the trial's history rows (stamped in its process) and the study's own stamps
    (the actor's ask and tell)."""
    starts = {e["trial_id"]: e["time"] for e in events if e["event"] == "start"}
    ends = {e["trial_id"]: e["time"] for e in events if e["event"] in ("end", "error")}
    asked = {t.system_attrs["tuner.trial_id"]: t.datetime_start.timestamp() for t in study_trials}
    told = {t.system_attrs["tuner.trial_id"]: t.datetime_complete.timestamp() for t in study_trials}
    entered = {trial: rows[0]["entered_at"] for trial, rows in histories.items()}
    reported = {trial: rows[-1]["reported_at"] for trial, rows in histories.items()}
    steps = {
        "Tune starts it (driver) .. its function entered (trial process)": (starts, entered),
        "entered .. the study's actor asked (ray.get_actor, ask)": (entered, asked),
        "asked .. told (the objective loaded and called, its tell sent)": (asked, told),
        "told .. its last report sent (tell's answer, Tune's report)": (told, reported),
        "last report sent .. Tune ends it (driver: results, records, callbacks)": (reported, ends),
        "Tune starts it .. Tune ends it": (starts, ends),
    }
    life = {
        step: 1000 * statistics.median(later[trial] - earlier[trial] for trial in earlier)
        for step, (earlier, later) in steps.items()
    }
    lives = [ends[trial] - starts[trial] for trial in starts]
    # Tune at times runs one trial at a time though two fit (a race in Tune with reuse_actors,
    # README.md's scaling section): the share of the span with both slots busy shows it
    changes = sorted([(when, 1) for when in starts.values()] + [(when, -1) for when in ends.values()])
    running, busy, since = 0, 0.0, 0.0
    for when, change in changes:
        busy += (when - since) if running >= SLOTS else 0.0
        running, since = running + change, when
    # the slots' time outside any trial's start .. end, shared out over the trials
    life["between trials (slot time outside them, per trial)"] = 1000 * max(0.0, SLOTS * span - sum(lives)) / len(lives)
    life["both slots busy (% of the span)"] = 100 * busy / span
    return life


def median_of(rounds: list[dict], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


RACE = (
    ": one trial at a time (Tune's race with reuse_actors, docs/ray-notes.md): its span is trials in a row, "
    "as the in-process study runs them"
)


def table(results: dict[str, dict[str, list[dict]]], trials: int) -> str:
    lines = [
        f"{trials} trials, median of {len(next(iter(next(iter(results.values())).values())))} round(s):",
        "",
        "| variant | contestant | wall s | study s | ms / trial (wall) | ms / trial (study) | x optuna (wall) | "
        "x optuna (study) | fixed s | a suggest ms | suggests / trial ms | a report ms | objective call ms | "
        "best value |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, by_name in results.items():
        base_wall, base_study = median_of(by_name["optuna"], "wall_s"), median_of(by_name["optuna"], "study_s")
        for name, rounds in by_name.items():
            wall, study = median_of(rounds, "wall_s"), median_of(rounds, "study_s")
            fixed, report = median_of(rounds, "fixed_s"), median_of(rounds, "report_mean_ms")
            lines.append(
                f"| {variant} | {name} | {wall:.1f} | {study:.2f} | {1000 * wall / trials:.0f} | "
                f"{1000 * study / trials:.1f} | {wall / base_wall:.1f} | {study / base_study:.1f} | "
                + (f"{fixed:.1f}" if fixed is not None else "")
                + f" | {median_of(rounds, 'suggest_mean_ms'):.3f} | {median_of(rounds, 'suggests_per_trial_ms'):.2f} | "
                + (f"{report:.3f}" if report is not None else "")
                + f" | {median_of(rounds, 'inside_median_ms'):.2f} | "
                + ", ".join(f"{r['best_value']:.4f}" for r in rounds)
                + " |"
            )
    lines += ["", "tuner's wall time, part by part (s, median over rounds):", ""]
    variants = list(results)
    lines += ["| part | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    parts = next(iter(results.values()))["tuner"][0]["parts_s"]
    for part in parts:
        cells = [statistics.median(r["parts_s"][part] for r in results[v]["tuner"]) for v in variants]
        lines.append(f"| {part} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    actor = [statistics.median(r["study_actor_start_s"] for r in results[v]["tuner"]) for v in variants]
    lines.append("| (of which the study's actor started) | " + " | ".join(f"{c:.2f}" for c in actor) + " |")
    cpu = [statistics.median(r["driver_cpu_s"] for r in results[v]["tuner"]) for v in variants]
    lines.append("| (the driver's CPU time, all of it) | " + " | ".join(f"{c:.2f}" for c in cpu) + " |")
    lines += ["", f"a tuner trial's life (ms, median over trials, then over rounds; {SLOTS} at once):", ""]
    lines += ["| from .. to | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    for step in next(iter(results.values()))["tuner"][0]["trial_life_ms"]:
        cells = [statistics.median(r["trial_life_ms"][step] for r in results[v]["tuner"]) for v in variants]
        lines.append(f"| {step} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    lines += ["", "tuner, round by round:", ""]
    for variant in variants:
        for number, r in enumerate(results[variant]["tuner"], start=1):
            busy = r["trial_life_ms"]["both slots busy (% of the span)"]
            lines.append(
                f"- {variant}, round {number}: wall {r['wall_s']:.1f} s, fixed {r['fixed_s']:.1f} s, trials' span "
                f"{r['study_s']:.2f} s ({r['study_per_trial_ms']:.0f} ms a trial), both slots busy {busy:.0f}%"
                + (RACE if busy < 10 else "")
            )
    loads = [load for by_name in results.values() for rounds in by_name.values() for r in rounds for load in r["load"]]
    lines += ["", f"the machine's 1-minute load average: {min(loads):.1f} to {max(loads):.1f} over the runs"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), help="default: both")
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep", action="store_true", help="keep each run's folder (the sweep, its logs) in --out")
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, Path(args.out), args.trials)
        if args.child == "tuner":  # it ends as `python -m tuner sweep` does
            from tuner.cli import leave

            leave(0)
        return
    out = Path(args.out or REPO / "benchmarks" / "results" / f"objective-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[dict]]] = {}
    for round_ in range(args.rounds):
        for variant in args.variant or list(VARIANTS):
            order = CONTESTANTS if round_ % 2 == 0 else CONTESTANTS[::-1]  # drift hits all alike
            for name in order:
                keep = out / f"round{round_ + 1}" if args.keep else None
                r = measure(name, variant, args.trials, keep)
                results.setdefault(variant, {n: [] for n in CONTESTANTS})[name].append(r)
                print(
                    f"round {round_ + 1}: {variant:<7} {name:<14} wall {r['wall_s']:6.1f} s, "
                    f"study {r['study_s']:6.2f} s, suggest {r['suggest_mean_ms']:.3f} ms, best {r['best_value']:.4f}",
                    flush=True,
                )
    bare = round_trip()
    markdown = table(results, args.trials)
    markdown += (
        f"\n\na bare Ray actor call from a 1-CPU task (no study, {bare['calls']} calls): "
        f"median {bare['median_ms']:.2f} ms, p90 {bare['p90_ms']:.2f} ms"
    )
    print("\n" + markdown)
    (out / "results.json").write_text(
        json.dumps({"trials": args.trials, "results": results, "bare_round_trip": bare}, indent=2)
    )
    (out / "results.md").write_text(markdown + "\n")
    print(f"\nwritten: {out / 'results.md'}")


if __name__ == "__main__":
    main()
