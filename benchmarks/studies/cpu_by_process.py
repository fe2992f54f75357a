"""The CPU every process on the machine used while a command ran, by kind of process.

    python benchmarks/studies/cpu_by_process.py -- .venv/bin/python benchmarks/studies/scaling.py \
        --trials 300 --only tuner --out /tmp/cpu-tuner

On a 2-core machine a sweep's wall time follows the CPU of its whole process tree, not only
the driver's: the trial processes, MLflow's writer, Ray's own daemons and the benchmark's
memory sampler all take the same cores. This runs the command, reads every process's
cumulative CPU from ``/proc`` every 0.25 s (a process that appears and exits between two
reads is missed: a few milliseconds each), and prints the CPU seconds each kind of
process used during the run, the busiest first, and the total.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def snapshot() -> dict[tuple[str, str], tuple[float, str]]:
    """(pid, start time) -> (CPU seconds so far, command line) for every process now."""
    seen = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():  # not this sampler's own
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # exited meanwhile
            continue
        name, fields = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
        seen[(pid, fields[19])] = (cpu, command or f"[{name}]")
    return seen


KINDS = (  # the first whose marker the command line holds names it
    ("tuner.tracking.writer", "MLflow's writer"),
    ("--child", "the sweep's driver (the benchmark's child)"),
    ("ray::IDLE", "ray::IDLE (a worker between tasks)"),
    ("ray::", None),  # the process title: ray::ImplicitFunc, ray::DashboardAgent, ...
    ("raylet", "raylet"),
    ("gcs_server", "gcs_server"),
    ("dashboard", "Ray's dashboard"),
    ("default_worker.py", "Ray worker (untitled)"),
    ("benchmarks/studies/", "the benchmark (memory sampler)"),
    ("-m tuner", "tuner's commands after the sweep (status, best, report)"),
)


def kind(command: str) -> str:
    for marker, name in KINDS:
        if marker in command:
            return name or command.split()[0].split(".")[0]
    return command.split()[0].rsplit("/", 1)[-1][:40]


def _merge(seen: dict[tuple[str, str], tuple[float, str]], now: dict[tuple[str, str], tuple[float, str]]) -> None:
    """The newest CPU of each process, under its newest command line; an exiting process
    has none (it shows its kernel name, in brackets), and keeps the one it had before."""
    for key, (cpu, command) in now.items():
        seen[key] = (cpu, seen[key][1] if key in seen and command.startswith("[") else command)


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        raise SystemExit("usage: cpu_by_process.py -- COMMAND ...")
    before = snapshot()
    started = time.perf_counter()
    process = subprocess.Popen(command)
    seen: dict[tuple[str, str], tuple[float, str]] = {}
    while process.poll() is None:
        _merge(seen, snapshot())
        time.sleep(0.25)
    _merge(seen, snapshot())
    wall = time.perf_counter() - started
    used: collections.Counter[str] = collections.Counter()
    for key, (cpu, line) in seen.items():
        spent = cpu - before.get(key, (0.0, ""))[0]
        if spent > 0:
            used[kind(line)] += spent
    total = sum(used.values())
    print("\n| process | CPU s |\n|---|---:|")
    for name, spent in used.most_common():
        if spent >= 0.1:
            print(f"| {name} | {spent:.1f} |")
    print(f"| **all** ({wall:.1f} s of wall: {total / wall:.2f} cores on average) | **{total:.1f}** |")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
