"""The cores a sweep's last trials leave idle, with ``scaling.lend_spare_cores`` off and on.

    TUNER_DATA_DIR=DIR python benchmarks/studies/spare_cores.py                  # ~6 min on 2 cores
    TUNER_DATA_DIR=DIR python benchmarks/studies/spare_cores.py --rounds 1 train.epochs=1

Runs the default sweep's experiment (experiments/mnist_asha.yaml) with a schedule that
ends the same way every time: FIFO, 3 trials on 2 slots, so that the third trial runs
alone after the first two (with ASHA, which trials stop early depends on the order
results arrive in, and two runs of the same sweep are not the same work). Each round
runs it once with the idle cores kept (``false``) and once lent (``true``), in turns,
and reports from the sweep's own records:

- the wall time of the whole command;
- the share of core time idle over the trials' span: the cores less those the running
  trials train with (each epoch's ``compute_s`` times its ``threads``, which the history
  records at the epoch's end: an epoch lent cores part of the way counts as lent all the
  way, so with lending the share is a lower bound);
- the lone tail: how long the last trial ran alone, and its images per second then.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
CORES = 2
SCHEDULE = [
    "scheduler={name: fifo}",
    "trials.num_samples=3",
    "train.epochs=2",
    "data.train_subset=20000",
    "tracking.mlflow.registry=false",
]


def run(lend: bool, folder: Path, extra: list[str]) -> dict:
    sets = [*SCHEDULE, *extra, f"scaling.lend_spare_cores={str(lend).lower()}", f"output_dir={folder}"]
    sets.append(f"tracking.mlflow.tracking_uri=sqlite:///{folder / 'mlflow.db'}")
    command = [sys.executable, "-m", "tuner", "sweep", "mnist_asha"] + [a for s in sets for a in ("--set", s)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tuner sweep exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return {"lend": lend, "wall_s": wall, **measure(folder / "mnist_asha")}


def measure(root: Path) -> dict:
    """Idle core share over the trials' span, and the lone tail, from the sweep's records."""
    rows = [json.loads(line) for path in sorted((root / "history").glob("*.jsonl")) for line in path.open()]
    events = [json.loads(line) for line in (root / "timeline.jsonl").open()]
    starts = {e["trial_id"]: e["time"] for e in events if e["event"] == "start"}
    ends = {e["trial_id"]: e["time"] for e in events if e["event"] == "end"}
    begin, finish = min(starts.values()), max(ends.values())
    trained = sum(row["compute_s"] * row.get("threads", 1) for row in rows)  # core-seconds in epochs
    last = max(ends, key=ends.get)
    alone_from = max(ends[t] for t in ends if t != last)  # the others have all ended
    lone = [row for row in rows if row["trial_id"] == last and row["reported_at"] - row["compute_s"] >= alone_from]
    return {
        "span_s": finish - begin,
        "idle_core_share": max(0.0, 1 - trained / (CORES * (finish - begin))),
        "lone_tail_s": finish - alone_from,
        "lone_images_per_s": statistics.mean(row["images_per_s"] for row in lone) if lone else float("nan"),
        "lone_threads": sorted({row.get("threads", 1) for row in lone}),
        "test_accuracy": json.loads((root / "best" / "metrics.json").read_text()).get("test_accuracy"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="*", help="more KEY=VALUE overrides of the sweep")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="tuner-spare-cores-") as scratch:
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)  # drift hits both alike
            for lend in order:
                runs.append(run(lend, Path(scratch) / f"r{round_}-{lend}", args.sets))
                r = runs[-1]
                print(
                    f"lend={str(lend).lower():5} wall {r['wall_s']:.1f} s, idle cores {r['idle_core_share']:.0%} "
                    f"of the span, alone {r['lone_tail_s']:.1f} s at {r['lone_images_per_s']:.0f} images/s "
                    f"(threads {r['lone_threads']}), test {r['test_accuracy']:.4f}",
                    flush=True,
                )
    print("\n| idle cores | wall s | trials' span s | idle core share | lone tail s | lone images/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for lend in (False, True):
        mine = [r for r in runs if r["lend"] == lend]
        med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "span_s", "idle_core_share")}
        tail = {k: statistics.median(r[k] for r in mine) for k in ("lone_tail_s", "lone_images_per_s")}
        print(
            f"| {'lent' if lend else 'kept'} | {med['wall_s']:.1f} | {med['span_s']:.1f} | "
            f"{med['idle_core_share']:.0%} | {tail['lone_tail_s']:.1f} | {tail['lone_images_per_s']:.0f} |"
        )
    (REPO / "benchmarks" / "results").mkdir(exist_ok=True)
    out = REPO / "benchmarks" / "results" / f"spare-cores-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(runs, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
