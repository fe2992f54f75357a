"""What the commands of several subjects share: a sweep file's arguments (sweep, validate,
submit), the cluster's timeout (sweep, resume, extend, submit), where best/ is and the
Pareto front (best, status and the end of a sweep)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

# A command by name -> what adds its parser (its arguments, its handler); each subject's
# register() fills it, tuner.cli.build_parser adds them in `tuner --help`'s order.
Commands = dict[str, Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]]


def add_sweep_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a sweep YAML file, or a bare name looked up in experiments/")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. --set trials.num_samples=8 (repeatable)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny run for checking a file: 2000 training and test images, 2 epochs, 2 trials; not registered",
    )


def add_cluster_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="how long to wait for the cluster to take the work (a job agent, every node), default 300",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a number of seconds > 0, but got {text!r}")
    return value


def cluster_timeout(args: argparse.Namespace) -> dict[str, float]:
    return {} if args.cluster_timeout is None else {"cluster_timeout_s": args.cluster_timeout}


def print_front(sweep: Any, folder: Any) -> None:
    """Several objectives: the Pareto front and the point the sweep's rule takes."""
    if sweep.objectives:
        from tuner.folder.records import trial_histories
        from tuner.results.front import front_lines

        print("\n".join(front_lines(sweep, trial_histories(folder))))


def best_where(folder: Any) -> str:
    """Where a sweep's best/ is, as users reach it: at its URI, else on disk."""
    from tuner.folder.remote import join

    return join(folder.remote, "best") if folder.remote else str(folder.best)
