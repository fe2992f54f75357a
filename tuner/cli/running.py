"""Running a sweep: ``sweep``, ``resume``, ``extend``, and checking its file: ``validate``,
``schema``. Each command's parser stands above its handler; a sweep ends with what it found
(the best trial, where it went, how to look further)."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from tuner.cli.common import Commands, add_cluster_timeout, add_sweep_file, best_where, cluster_timeout, print_front
from tuner.invocation import tuner_command


def register(commands: Commands) -> None:
    commands.update(
        sweep=_add_sweep, resume=_add_resume, extend=_add_extend, validate=_add_validate, schema=_add_schema
    )


def _add_sweep(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser("sweep", help="run a sweep and export its best model")
    add_sweep_file(sweep)
    sweep.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    sweep.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    sweep.add_argument("--dry-run", action="store_true", help="validate and print the resolved config only")
    add_cluster_timeout(sweep)
    sweep.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.dry_run:
        return cmd_validate(args)
    from tuner.driver.sweep import run_sweep

    sweep = _load(args)
    outcome = run_sweep(sweep, address=args.address, verbose=args.verbose, **cluster_timeout(args))
    _print_outcome(sweep, outcome.best, outcome.folder, smoke=args.smoke)
    return 0


def _add_resume(commands: argparse._SubParsersAction) -> None:
    resume = commands.add_parser("resume", help="continue an interrupted sweep from its output folder")
    resume.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    resume.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    resume.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    add_cluster_timeout(resume)
    resume.set_defaults(handler=cmd_resume)


def cmd_resume(args: argparse.Namespace) -> int:
    from tuner.driver.sweep import run_sweep
    from tuner.results.summaries import open_sweep

    sweep, folder = open_sweep(args.folder)
    outcome = run_sweep(sweep, address=args.address, verbose=args.verbose, folder=folder, **cluster_timeout(args))
    _print_outcome(sweep, outcome.best, folder)
    return 0


def _add_extend(commands: argparse._SubParsersAction) -> None:
    extend = commands.add_parser(
        "extend", help="run more trials on a sweep that ended, in its folder; the searcher goes on from what it learned"
    )
    extend.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    extend.add_argument("--trials", type=int, required=True, help="how many more trials")
    extend.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    extend.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    add_cluster_timeout(extend)
    extend.set_defaults(handler=cmd_extend)


def cmd_extend(args: argparse.Namespace) -> int:
    from tuner.driver.extend import extend_sweep

    outcome = extend_sweep(
        args.folder, args.trials, address=args.address, verbose=args.verbose, **cluster_timeout(args)
    )
    from tuner.results.summaries import open_sweep

    sweep, folder = open_sweep(args.folder)
    _print_outcome(sweep, outcome.best, folder)
    return 0


def _add_validate(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser("validate", help="check a sweep file and print the resolved config")
    add_sweep_file(validate)
    validate.set_defaults(handler=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    sweep = _load(args)
    print(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False), end="")
    print(f"# {args.file}: valid; search space: {', '.join(sweep.flat_specs()) or '(empty)'}")
    return 0


def _add_schema(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser(
        "schema", help="print the sweep file's JSON Schema (for an editor: python -m tuner schema > tuner.schema.json)"
    )
    schema.set_defaults(handler=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from tuner.sweepfile.load import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def _load(args: argparse.Namespace):
    from tuner.sweepfile.load import load_sweep

    return load_sweep(args.file, args.overrides, smoke=args.smoke)


def _print_outcome(sweep: Any, metrics: dict[str, Any], folder: Any, *, smoke: bool = False) -> None:
    from tuner.results.tables import best_lines

    best = folder.best
    hyper = yaml.safe_load((best / "config.yaml").read_text())["hyperparameters"]
    print()
    print("\n".join(best_lines(sweep, metrics, hyper)))
    print(f"  exported to {best_where(folder)}")
    if stalled := _stalled(folder):
        print(f"  stalled: {stalled}; their threads' stacks: tune/<trial>/stall-stacks.txt")
    if sweep.objectives and not folder.remote:
        print_front(sweep, folder)
    if metrics.get("mlflow_behind"):  # its server was away at the end: the line above says how to catch up
        print(f"  MLflow: {_mlflow_uri(sweep, folder)} lacks some of this sweep's records (see above)")
    elif metrics.get("model_version"):
        from tuner.tracking.mlflow_runs import registered_model_name

        print(
            f"  MLflow: {_mlflow_uri(sweep, folder)}, registered model "
            f"{registered_model_name(sweep)!r} version {metrics['model_version']}"
        )
    elif sweep.tracking.mlflow.enabled and not sweep.has_model:
        print(
            f"  MLflow: {_mlflow_uri(sweep, folder)}, every trial recorded; "
            "no model logged (no model.factory to rebuild it)"
        )
    elif sweep.tracking.mlflow.enabled and not sweep.tracking.mlflow.registry:
        why = "a --smoke run" if smoke else "tracking.mlflow.registry: false"
        print(f"  MLflow: {_mlflow_uri(sweep, folder)}, model logged on the sweep's run, not registered ({why})")
    where = folder.where if folder.remote else _shown(folder.root)
    tuner, indent = tuner_command(), " " * len("  look further: ")
    print(f"  look further: {tuner} report {where}   (plots of the sweep in one HTML page)")
    if not folder.remote:
        print(f"{indent}{tuner} ui {_shown(folder.root.parent)}   (TensorBoard and MLflow UIs)")
    print(f"{indent}{tuner} status {where}")


def _mlflow_uri(sweep: Any, folder: Any) -> str:
    """The store the sweep's records went to: the one its mlflow.json names (a resumed sweep
    keeps the store it began in), else the one the config gives."""
    from tuner.tracking.mlflow_runs import sweep_uri

    return sweep_uri(sweep, folder)


def _stalled(folder: Any) -> str:
    """The trials the stall watchdog stopped, how often, and whether that ended them."""
    from collections import Counter

    from tuner.folder import records

    timeline = records.read_timeline(folder)
    stalls = Counter(event["trial_id"] for event in timeline if event.get("event") == "stall")
    ended = records.stall_reasons(timeline)
    times = {1: "once", 2: "twice"}
    return ", ".join(
        f"{trial} ({times.get(count, f'{count} times')}, {'errored' if trial in ended else 'retried'})"
        for trial, count in stalls.items()
    )


def _shown(path: Any) -> str:
    """A folder as the user would type it: relative to the working directory when inside it."""
    from pathlib import Path

    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)
