"""Reading a sweep's folder, without starting Ray: ``status``, ``best``, ``report``,
``export``, ``predict``, ``ui``. Each command's parser stands above its handler."""

from __future__ import annotations

import argparse
import contextlib
import sys

from tuner.cli.common import Commands, best_where, print_front
from tuner.errors import NoFeasibleTrial, TunerError
from tuner.invocation import tuner_command


def register(commands: Commands) -> None:
    commands.update(
        status=_add_status, best=_add_best, export=_add_export, predict=_add_predict, report=_add_report, ui=_add_ui
    )


def _add_status(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser("status", help="the trials of a sweep and the best so far")
    status.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    status.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from tuner.cluster.connect import how_to_continue
    from tuner.results.summaries import best_trial, open_sweep, trial_summaries
    from tuner.results.tables import trials_table

    sweep, folder = open_sweep(args.folder)
    summaries = trial_summaries(sweep, folder)
    print("\n".join(trials_table(sweep, summaries)))
    if any(t.best_value is not None for t in summaries):
        try:
            best = best_trial(sweep, folder, summaries)
        except NoFeasibleTrial as error:
            print(f"best so far: none; {str(error).removeprefix(f'{folder.where}: ')}")
        else:
            print(f"best so far: {best.trial_id} at epoch {best.best_epoch}: {sweep.metric}={best.best_value:.4f}")
            print_front(sweep, folder)
    hint = how_to_continue(sweep, folder, summaries, args.folder)
    if hint:
        print(hint)
    return 0


def _add_best(commands: argparse._SubParsersAction) -> None:
    best = commands.add_parser("best", help="the best trial's hyperparameters and metrics")
    best.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    best.set_defaults(handler=cmd_best)


def cmd_best(args: argparse.Namespace) -> int:
    from tuner.results.summaries import best_trial, open_sweep, trial_summaries
    from tuner.results.tables import short

    sweep, folder = open_sweep(args.folder)
    best = best_trial(sweep, folder, trial_summaries(sweep, folder))
    print(
        f"best trial {best.trial_id} ({best.status}) at epoch {best.best_epoch}: {sweep.metric}={best.best_value:.4f}"
    )
    print("hyperparameters:")
    for key, value in best.config.items():
        print(f"  {key}: {short(value)}")
    exported = folder.best / "metrics.json"
    if exported.is_file():
        from tuner.folder.store import read_json

        metrics = read_json(exported, what="export's metrics.json")
        if metrics.get("trial_id") == best.trial_id and metrics.get("test_accuracy") is not None:
            print(f"test_accuracy: {metrics['test_accuracy']:.4f} (exported in {best_where(folder)})")
    print_front(sweep, folder)
    return 0


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="(re)write the best model package")
    export.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    export.add_argument("--to", help="destination folder (default: <folder>/best)")
    export.add_argument("--format", choices=["state_dict", "torchscript"], default="state_dict")
    export.add_argument(
        "--overwrite", action="store_true", help="replace a previous export there (only tuner's files are replaced)"
    )
    export.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tuner.folder.store import SweepLock
    from tuner.results import export
    from tuner.results.export_own import exporter
    from tuner.results.summaries import all_results, open_sweep
    from tuner.results.tables import score_on_test

    sweep, folder = open_sweep(args.folder)
    if folder.remote and not args.to:
        raise TunerError(
            f"{folder.remote}: the sweep exported its best/ there itself; to export again from storage, "
            "give a local folder with --to DIR"
        )
    to = Path(args.to).expanduser().resolve() if args.to else folder.best
    export.check_destination(to, overwrite=args.overwrite)  # before anything is read or computed
    inside = to == folder.root or folder.root in to.parents
    with SweepLock(folder) if inside else contextlib.nullcontext():  # a running sweep owns its folder
        exported = exporter(sweep)(
            sweep, folder, all_results(sweep, folder), to=to, format=args.format, overwrite=args.overwrite
        )
    metrics = exported.metrics
    print(
        f"exported trial {metrics['trial_id']} at epoch {metrics['epoch']} ({args.format}) to {to}: "
        f"{sweep.metric}={metrics[sweep.metric]:.4f}, {score_on_test(metrics, sweep)}"
    )
    return 0


def _add_predict(commands: argparse._SubParsersAction) -> None:
    predict = commands.add_parser("predict", help="batch predictions of an exported model to CSV")
    predict.add_argument("model_dir", help="an exported model folder, e.g. runs/mnist_asha/best")
    predict.add_argument("--data", required=True, help="mnist:test, fashion_mnist:test, a .npy/IDX file or a folder")
    predict.add_argument("--out", default="predictions.csv", help="CSV to write (default predictions.csv)")
    predict.add_argument("--batch-size", type=int, default=1024)
    predict.set_defaults(handler=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from tuner.results.predict import predict_to_csv

    if args.batch_size < 1:
        raise TunerError(f"predict --batch-size: must be >= 1, but got {args.batch_size}")
    summary = predict_to_csv(args.model_dir, args.data, args.out, batch_size=args.batch_size)
    line = f"wrote {summary['images']} predictions to {args.out} in {summary['seconds']:.1f} s"
    if "accuracy" in summary:
        line += f"; accuracy against the labels: {summary['accuracy']:.4f}"
    print(line)
    return 0


def _add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="an HTML report of a sweep (or two side by side) with PNGs; logged to its MLflow run"
    )
    report.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha (finished, running or not)")
    report.add_argument("other", nargs="?", help="a second sweep folder to put beside the first")
    report.add_argument("--out", help="folder for report.html and the PNGs (default: <folder>/report)")
    report.add_argument("--no-mlflow", action="store_true", help="do not log the report to the sweep's MLflow run")
    report.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tuner.results import report, report_data
    from tuner.tracking import mlflow_runs as tracking

    sweeps = [report_data.read(folder) for folder in [args.folder, args.other] if folder]
    out = Path(args.out).expanduser().resolve() if args.out else report.default_out(sweeps)
    files = report.write(sweeps, out)
    print(f"wrote {files[0]} and {len(files) - 1} PNGs; open it in a browser (it needs no network)")
    if not args.no_mlflow:
        where = "report" if len(sweeps) == 1 else f"report/vs-{sweeps[1].label}"
        try:
            run = tracking.log_report(sweeps[0].folder, files, where)
        except Exception as error:  # the report stands without MLflow: say why, in one line
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            print(f"  not logged to MLflow: {reason}", file=sys.stderr)
            return 0
        if run:
            print(f"  logged to MLflow: run {run}, artifacts {where}/ (see {tuner_command()} ui {args.folder})")
    return 0


def _add_ui(commands: argparse._SubParsersAction) -> None:
    ui = commands.add_parser("ui", help="TensorBoard and the MLflow UI on a sweep's outputs")
    ui.add_argument("output", nargs="?", default="runs", help="output folder (runs/) or one sweep's folder")
    ui.add_argument("--host", default="127.0.0.1", help="bind address for both servers (default 127.0.0.1)")
    ui.add_argument("--tensorboard-port", type=int, default=6006)
    ui.add_argument("--mlflow-port", type=int, default=5000)
    ui.set_defaults(handler=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tuner.folder.remote import is_remote
    from tuner.results.ui import serve

    if is_remote(args.output):
        raise TunerError(
            f"{args.output}: ui serves a local output folder; for a sweep at a storage URI open your MLflow "
            "server's own UI, and point TensorBoard at the sweep's tune/ folder there"
        )
    return serve(
        Path(args.output), host=args.host, tensorboard_port=args.tensorboard_port, mlflow_port=args.mlflow_port
    )
