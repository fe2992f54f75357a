"""Side-by-side benchmark: tuner against Ray Tune as documented, Optuna and raw PyTorch.

    python benchmarks/run.py                      # both suites, full MNIST (about 40 min on 2 cores)
    python benchmarks/run.py --suite default --subset 3000 --epochs 1   # a quick check

The contestants are the scripts in ``contestants/`` (with ``common.py``, their shared
budget, data and training loop). Every contestant runs as a child process of this one, one at a time, on the same
budget (same configurations, model, epochs, split); their order rotates between
seeds (``--seeds``) so that drift hits all alike. From outside, this script
measures each one's wall time and the peak memory of its whole process tree (PSS:
shared pages, such as Ray's object store, counted once). It prints a table with
ratios and writes ``results.json`` and ``results.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
CONTESTANTS_DIR = HERE / "contestants"  # the scripts below, and common.py beside them
sys.path.insert(0, str(CONTESTANTS_DIR))

from common import REPO, Budget  # noqa: E402

# name -> (script, extra args). Threads: a tuner trial has one CPU, two run at once;
# Optuna runs its trials one after another in one process, so it gets both cores.
CONTESTANTS = {
    "tuner": ("tuner_sweep.py", []),
    "tuner_2workers": ("tuner_sweep.py", ["--workers", "2"]),
    "ray_tune_documented": ("ray_tune_documented.py", []),
    "optuna_inprocess": ("optuna_inprocess.py", ["--threads", "2"]),
    "raw_pytorch": ("raw_pytorch.py", ["--threads", "1"]),
    # Two raw runs at once, one per core: the floor for two concurrent 1-CPU trials.
    "raw_pytorch_x2": ("raw_pytorch.py", ["--threads", "1", "--copies", "2"]),
    # Memory probes: two 1-epoch trials, one at a time vs both at once, on the full
    # training set and on a tenth of it (if each trial copied the data, the extra
    # trial's memory would grow with the data set).
    "tuner_probe_1slot": ("tuner_sweep.py", ["--max-concurrent", "1"]),
    "tuner_probe_2slots": ("tuner_sweep.py", ["--max-concurrent", "2"]),
    "tuner_probe_1slot_small": ("tuner_sweep.py", ["--max-concurrent", "1"]),
    "tuner_probe_2slots_small": ("tuner_sweep.py", ["--max-concurrent", "2"]),
}
PROBE_SMALL_SUBSET = 6_000
EQUAL_WALL_SHARES = (0.25, 0.5, 0.75, 1)
FLOORS = ("raw_pytorch", "tuner_probe")  # measure the machine, not the search: one seed is enough
SUITES = {
    # The default sweep: six trials of the light CNN, three epochs, ASHA.
    "default": {"trials": 6, "epochs": 3, "contestants": list(CONTESTANTS)},
    # PyTorch's classic MNIST CNN: four trials, two epochs (the reference run).
    "classic": {
        "trials": 4,
        "epochs": 2,
        "contestants": ["tuner", "ray_tune_documented", "optuna_inprocess", "raw_pytorch", "raw_pytorch_x2"],
    },
}


def learning_rates(count: int, seed: int) -> list[float]:
    """Log-spaced over the default sweep's range, in a seeded order (ASHA sees them in turn)."""
    values = np.geomspace(1e-3, 4e-3, count)
    return [round(float(v), 6) for v in np.random.default_rng(seed).permutation(values)]


class TreeMemory:
    """Peak PSS of a process and all its descendants, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 1.0):
        self.root, self.interval = psutil.Process(pid), interval
        self.peak_pss = 0
        self.peak_uss_by_name: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = 0
            for process in processes:
                try:
                    info = process.memory_full_info()
                    name = process.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += info.pss
                self.peak_uss_by_name[name] = max(self.peak_uss_by_name.get(name, 0), info.uss)
            self.peak_pss = max(self.peak_pss, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measured_child(name: str, command: list[str], out: Path, env: dict[str, str] | None = None) -> dict:
    """A contestant run as a child process to its end: the JSON it wrote to ``out``, with
    its wall time and the peak PSS of its process tree (``wall_s``, ``peak_pss_mb``)."""
    began = time.perf_counter()
    process = subprocess.Popen([*command, "--out", str(out)], env=env)
    memory = TreeMemory(process.pid, interval=0.25)
    code = process.wait()
    memory.stop()
    if code:
        raise SystemExit(f"{name} failed (exit {code})")
    result = json.loads(out.read_text())
    result.update(wall_s=time.perf_counter() - began, peak_pss_mb=memory.peak_pss / 2**20)
    print(f"{name}: {json.dumps(result)}", flush=True)
    return result


def run_contestant(name: str, budget: Budget, folder: Path) -> dict:
    script, extra = CONTESTANTS[name]
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "result.json"
    path = os.pathsep.join([str(CONTESTANTS_DIR), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, str(CONTESTANTS_DIR / script), "--budget", budget.to_json(), "--out", str(out), *extra]
    print(f"--- {budget.suite}/{name}: {' '.join([script, *extra])}", flush=True)
    started_at = time.time()
    started = time.perf_counter()
    with open(folder / "log.txt", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder)
        memory = TreeMemory(process.pid)
        code = process.wait()
        memory.stop()
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name} failed with exit code {code}; see {folder / 'log.txt'}")
    result = json.loads(out.read_text())
    result.update(wall_s=wall, peak_pss_mb=memory.peak_pss / 2**20)
    # Each epoch's validation score, at seconds since this contestant's command started.
    result["curve"] = sorted((at - started_at, value) for at, value in result.get("curve", []))
    result["best_curve"] = sorted((at - started_at, val, test) for at, val, test in result.get("best_curve", []))
    result["peak_uss_mb_by_process"] = {k: v / 2**20 for k, v in sorted(memory.peak_uss_by_name.items())}
    print(
        f"    wall {wall:.0f}s, best val {result['best_val_accuracy']:.4f}, test {result['test_accuracy']:.4f}, "
        f"{result['epochs_run']} epochs, peak PSS {result['peak_pss_mb']:.0f} MB",
        flush=True,
    )
    return result


def derive(results: dict[str, dict], budget: Budget) -> dict:
    """The figures of the issue, from the raw results."""
    figures: dict = {}
    raw = results.get("raw_pytorch")
    for name, result in results.items():
        if not name.startswith("tuner") or "probe" in name:
            continue
        slots = 1 if result.get("workers", 1) > 1 else budget.slots
        figures[name] = {
            "sweep_efficiency": result["compute_s"] / (result["wall_s"] * slots),
            "sweep_efficiency_fit": result["compute_s"] / (result["fit_span_s"] * slots),
            "start_to_first_step_s": _spread(result["start_to_first_step_s"]),
            "end_to_next_start_s": _spread(result["end_to_next_start_s"]),
            "images_per_s": statistics.median(result["images_per_s"]),
        }
        if raw:
            figures[name]["throughput_vs_raw"] = figures[name]["images_per_s"] / raw["images_per_s"]
        if "raw_pytorch_x2" in results and result.get("workers", 1) == 1:
            floor = results["raw_pytorch_x2"]["images_per_s"]
            figures[name]["throughput_vs_raw_x2"] = figures[name]["images_per_s"] / floor
        for other in ("ray_tune_documented", "optuna_inprocess"):
            if other in results:
                figures[name][f"wall_vs_{other}"] = result["wall_s"] / results[other]["wall_s"]
                # Equal wall-clock budget: what each held when the quicker of the two
                # finished, and at a quarter, half and three quarters of that time.
                quicker = min(result["wall_s"], results[other]["wall_s"])
                for share in EQUAL_WALL_SHARES:
                    key = f"at_equal_wall_vs_{other}" if share == 1 else f"at_{share:.0%}_wall_vs_{other}"
                    ours, theirs = best_at(result, quicker * share), best_at(results[other], quicker * share)
                    figures[name][key] = {
                        "seconds": quicker * share,
                        "tuner_best_val": ours[0],
                        "other_best_val": theirs[0],
                        "tuner_test": ours[1],
                        "other_test": theirs[1],
                    }
    for suffix, n_train in (("", budget.train_subset or 60_000), ("_small", PROBE_SMALL_SUBSET)):
        probes = results.get(f"tuner_probe_1slot{suffix}"), results.get(f"tuner_probe_2slots{suffix}")
        if all(probes):
            figures[f"memory_per_extra_trial{suffix}"] = {
                "train_images": n_train,
                "growth_mb": probes[1]["peak_pss_mb"] - probes[0]["peak_pss_mb"],
                "data_uint8_mb": n_train * 784 / 2**20,  # as tuner holds it
                "data_float32_mb": n_train * 784 * 4 / 2**20,  # as ToTensor makes it
            }
    return figures


def best_at(result: dict, seconds: float) -> tuple[float | None, float | None]:
    """The best validation accuracy reported within ``seconds`` of the start, and the test
    accuracy of the model that scored it (None: nothing yet, or not scored)."""
    rising = [(val, test) for at, val, test in result.get("best_curve", []) if at <= seconds]
    if rising:
        return rising[-1]
    reached = [value for at, value in result["curve"] if at <= seconds]
    return (max(reached) if reached else None), None


def across_seeds(per_seed: list[dict]) -> dict:
    """Each tuner-against-peer figure over the seeds: mean, min and max."""
    summary: dict = {}
    for name in per_seed[0]:
        if not isinstance(per_seed[0][name], dict) or "sweep_efficiency" not in per_seed[0][name]:
            continue
        for key, first in per_seed[0][name].items():
            values = [figures[name].get(key) for figures in per_seed if name in figures]
            if key.startswith("wall_vs_") or key == "sweep_efficiency":
                summary.setdefault(name, {})[key] = _stats(values)
            elif _at_wall(key):
                summary.setdefault(name, {})[key] = {
                    field: _stats([v[field] for v in values if v[field] is not None]) for field in first
                }
    return summary


def _at_wall(key: str) -> bool:
    return key.startswith("at_") and "_wall_vs_" in key


def _stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def _spread(values: list[float]) -> dict:
    if not values:
        return {}
    return {"median": statistics.median(values), "max": max(values), "n": len(values)}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(suite: str, results: dict[str, dict], figures: dict) -> str:
    lines = [
        f"### suite `{suite}`",
        "",
        "| contestant | wall s | best val acc | test acc | epochs run | compute s | peak PSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['wall_s']:.0f} | {r['best_val_accuracy']:.4f} | {r['test_accuracy']:.4f} | "
            f"{r['epochs_run']} | {r['compute_s']:.0f} | {r['peak_pss_mb']:.0f} |"
        )
    for name, f in figures.items():
        if not isinstance(f, dict) or "sweep_efficiency" not in f:
            continue
        lines += [
            "",
            f"**{name}**: sweep efficiency {f['sweep_efficiency']:.2f} (whole command; "
            f"{f['sweep_efficiency_fit']:.2f} from first trial start to last trial end); "
            f"trial start to first step median {f['start_to_first_step_s'].get('median', float('nan')):.2f} s "
            f"(max {f['start_to_first_step_s'].get('max', float('nan')):.2f} s); trial end to next start median "
            f"{f['end_to_next_start_s'].get('median', float('nan')):.2f} s; throughput "
            f"{f['images_per_s']:.0f} img/s"
            + (f" = {f['throughput_vs_raw']:.2f} x raw PyTorch alone" if "throughput_vs_raw" in f else "")
            + (f", {f['throughput_vs_raw_x2']:.2f} x two raw runs at once" if "throughput_vs_raw_x2" in f else "")
            + "".join(f"; wall {f[k]:.2f} x {k.removeprefix('wall_vs_')}" for k in f if k.startswith("wall_vs_"))
            + "".join(
                f"; at {f[k]['seconds']:.0f} s best val {_fmt(f[k]['tuner_best_val'])} vs "
                f"{_fmt(f[k]['other_best_val'])}, its test {_fmt(f[k]['tuner_test'])} vs "
                f"{_fmt(f[k]['other_test'])} ({k.removeprefix('at_equal_wall_vs_')})"
                for k in f
                if k.startswith("at_equal_wall_vs_")
            ),
        ]
    for key in ("memory_per_extra_trial", "memory_per_extra_trial_small"):
        if key in figures:
            m = figures[key]
            lines += [
                "",
                f"Peak memory (PSS) grows by {m['growth_mb']:.0f} MB when a second trial runs at once, on "
                f"{m['train_images']:,} training images (the data set: {m['data_uint8_mb']:.0f} MB as uint8, "
                f"{m['data_float32_mb']:.0f} MB as float32).",
            ]
    return "\n".join(lines)


def seeds_table(suite: str, summary: dict) -> str:
    """tuner against each peer over the seeds: mean [min, max]."""
    lines = [
        f"### suite `{suite}`, over the seeds: mean [min, max]",
        "",
        "| figure | " + " | ".join(summary) + " |",
        "|---|" + "---:|" * len(summary),
    ]

    def cell(stats: dict, digits: int) -> str:
        if not stats:
            return "-"
        return f"{stats['mean']:.{digits}f} [{stats['min']:.{digits}f}, {stats['max']:.{digits}f}] (n={stats['n']})"

    keys = sorted({k for figures in summary.values() for k in figures})
    for key in keys:
        if _at_wall(key):
            for field in ("seconds", "tuner_best_val", "other_best_val", "tuner_test", "other_test"):
                row = [cell(f.get(key, {}).get(field, {}), 0 if field == "seconds" else 4) for f in summary.values()]
                lines.append(f"| {key}: {field} | " + " | ".join(row) + " |")
        else:
            lines.append(f"| {key} | " + " | ".join(cell(f.get(key, {}), 2) for f in summary.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", action="append", choices=list(SUITES), help="default: all suites")
    parser.add_argument("--only", action="append", choices=list(CONTESTANTS), help="run only these contestants")
    parser.add_argument("--subset", type=int, default=None, help="train on N images (default: all 60,000)")
    parser.add_argument("--epochs", type=int, default=None, help="override the suite's epochs")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="run the peers once per seed (0..N-1: split, learning-rate order, initialisation), rotating the "
        "order; the floors (raw PyTorch, memory probes) run with the first seed only",
    )
    parser.add_argument("--out", default=str(HERE / "results" / time.strftime("%Y%m%d-%H%M%S")))
    parser.add_argument("--derive", metavar="RESULTS_JSON", help="recompute the figures and tables of an earlier run")
    args = parser.parse_args()
    if args.derive:
        rederive(Path(args.derive))
        return
    out = Path(args.out).resolve()
    report: dict = {"machine": _machine(), "command": " ".join(sys.argv), "suites": {}}
    markdown = []
    for suite in args.suite or list(SUITES):
        spec = SUITES[suite]
        names = [n for n in spec["contestants"] if not args.only or n in args.only]
        per_seed: list[dict] = []
        for seed in range(args.seeds):
            budget = Budget(
                suite=suite,
                lrs=learning_rates(spec["trials"], seed=seed),
                epochs=args.epochs or spec["epochs"],
                train_subset=args.subset,
                seed=seed,
            )
            runnable = [n for n in names if seed == 0 or not n.startswith(FLOORS)]
            order = runnable[seed % len(runnable) :] + runnable[: seed % len(runnable)]
            results: dict[str, dict] = {}
            for name in order:
                run_budget = replace(budget, lrs=budget.lrs[:2], epochs=1) if "probe" in name else budget
                if name.endswith("_small"):
                    run_budget = replace(run_budget, train_subset=PROBE_SMALL_SUBSET)
                results[name] = run_contestant(name, run_budget, out / suite / f"{name}-seed{seed}")
            if seed > 0:  # the floors of the first seed (throughput does not depend on the seed)
                results.update({n: r for n, r in per_seed[0]["results"].items() if n.startswith(FLOORS)})
            results = {n: results[n] for n in names if n in results}
            figures = derive(results, budget)
            per_seed.append({"budget": budget.__dict__, "results": results, "figures": figures})
            markdown.append(table(f"{suite}, seed {seed}", results, figures))
            print(markdown[-1], flush=True)
        report["suites"][suite] = {"seeds": per_seed}
        markdown += summarise(suite, report["suites"][suite])
    write_report(out / "results.json", report, markdown)
    print(f"\nwritten: {out / 'results.md'}")


def summarise(suite: str, runs: dict) -> list[str]:
    """Fills ``runs["across_seeds"]`` from its seeds' figures; returns its table, if any."""
    runs["across_seeds"] = across_seeds([run["figures"] for run in runs["seeds"]])
    if not runs["across_seeds"]:
        return []
    text = seeds_table(suite, runs["across_seeds"])
    print(text, flush=True)
    return [text]


def write_report(path: Path, report: dict, markdown: list[str]) -> None:
    """``results.json`` and, beside it, ``results.md``."""
    path.write_text(json.dumps(report, indent=2, default=float))
    header = f"Machine: {report['machine']}\n\nCommand: `{report['command']}`\n\n"
    (path.parent / "results.md").write_text(header + "\n\n".join(markdown) + "\n")


def rederive(path: Path) -> None:
    """The figures and tables again from a ``results.json`` (after a change to ``derive``)."""
    report = json.loads(path.read_text())
    markdown = []
    for suite, runs in report["suites"].items():
        for run in runs["seeds"]:
            budget = Budget(**run["budget"])
            run["figures"] = derive(run["results"], budget)
            markdown.append(table(f"{suite}, seed {budget.seed}", run["results"], run["figures"]))
            print(markdown[-1], flush=True)
        markdown += summarise(suite, runs)
    write_report(path, report, markdown)


def _machine() -> str:
    import platform

    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


if __name__ == "__main__":
    main()
