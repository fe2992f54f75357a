"""The command line: ``python -m tuner sweep mnist_asha.yaml`` and friends.

A user error prints one line and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import yaml

from tuner.errors import TunerError

EXIT_USER_ERROR = 2


def _add_sweep_file(parser: argparse.ArgumentParser) -> None:
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
        "--smoke", action="store_true", help="tiny run for checking a file: 2000 images, 2 epochs, 2 trials"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Hyperparameter sweeps on Ray Tune from one YAML file.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    commands = parser.add_subparsers(dest="command", required=True)

    sweep = commands.add_parser("sweep", help="run a sweep and export its best model")
    _add_sweep_file(sweep)
    sweep.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    sweep.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    sweep.add_argument("--dry-run", action="store_true", help="validate and print the resolved config only")
    sweep.set_defaults(handler=cmd_sweep)

    ui = commands.add_parser("ui", help="TensorBoard and the MLflow UI on a sweep's outputs")
    ui.add_argument("output", nargs="?", default="runs", help="output folder (runs/) or one sweep's folder")
    ui.add_argument("--host", default="127.0.0.1", help="bind address for both servers (default 127.0.0.1)")
    ui.add_argument("--tensorboard-port", type=int, default=6006)
    ui.add_argument("--mlflow-port", type=int, default=5000)
    ui.set_defaults(handler=cmd_ui)

    validate = commands.add_parser("validate", help="check a sweep file and print the resolved config")
    _add_sweep_file(validate)
    validate.set_defaults(handler=cmd_validate)
    return parser


def _load(args: argparse.Namespace):
    from tuner.config import load_sweep

    return load_sweep(args.file, args.overrides, smoke=args.smoke)


def cmd_validate(args: argparse.Namespace) -> int:
    sweep = _load(args)
    print(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False), end="")
    print(f"# {args.file}: valid; search space: {', '.join(sweep.param_specs()) or '(empty)'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.dry_run:
        return cmd_validate(args)
    from tuner.sweep import paths_for, run_sweep

    sweep = _load(args)
    metrics = run_sweep(sweep, address=args.address, verbose=args.verbose).best
    best = paths_for(sweep).best
    print(
        f"\nbest trial {metrics['trial_id']} at epoch {metrics['epoch']}: "
        f"{sweep.metric}={metrics[sweep.metric]:.4f}, test_accuracy={metrics['test_accuracy']:.4f} "
        f"on {metrics['test_images']} test images"
    )
    hyper = yaml.safe_load((best / "config.yaml").read_text())["hyperparameters"]
    print("  hyperparameters: " + ", ".join(f"{k}={_short(v)}" for k, v in hyper.items()))
    print(f"  exported to {best}")
    if metrics.get("model_version"):
        from tuner.tracking import registered_model_name, tracking_uri

        print(
            f"  MLflow: {tracking_uri(sweep)}, registered model "
            f"{registered_model_name(sweep)!r} version {metrics['model_version']}"
        )
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tuner.ui import serve

    return serve(
        Path(args.output), host=args.host, tensorboard_port=args.tensorboard_port, mlflow_port=args.mlflow_port
    )


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except TunerError as error:
        if args.debug:
            raise
        print(f"tuner: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130
