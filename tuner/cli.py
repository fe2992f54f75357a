"""The command line: ``python -m tuner sweep mnist_asha.yaml`` and friends.

A user error prints one line and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import yaml

from tuner.errors import TunerError
from tuner.invocation import tuner_command

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
        "--smoke",
        action="store_true",
        help="tiny run for checking a file: 2000 training and test images, 2 epochs, 2 trials; not registered",
    )


def _add_cluster_timeout(parser: argparse.ArgumentParser) -> None:
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


def _cluster_timeout(args: argparse.Namespace) -> dict[str, float]:
    return {} if args.cluster_timeout is None else {"cluster_timeout_s": args.cluster_timeout}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Hyperparameter sweeps on Ray Tune from one YAML file.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    commands = parser.add_subparsers(dest="command", required=True)

    sweep = commands.add_parser("sweep", help="run a sweep and export its best model")
    _add_sweep_file(sweep)
    sweep.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    sweep.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    sweep.add_argument("--dry-run", action="store_true", help="validate and print the resolved config only")
    _add_cluster_timeout(sweep)
    sweep.set_defaults(handler=cmd_sweep)

    submit = commands.add_parser("submit", help="run a sweep (or resume a sweep folder) as a Ray Job on a cluster")
    _add_sweep_file(submit)
    submit.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    submit.add_argument("--follow", action="store_true", help="stream the job's logs; exit with its outcome")
    _add_cluster_timeout(submit)
    submit.set_defaults(handler=cmd_submit)

    jobs = commands.add_parser("jobs", help="tuner's Ray Jobs on a cluster and their state")
    jobs.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    jobs.set_defaults(handler=cmd_jobs)

    stop = commands.add_parser("stop", help="stop a sweep's Ray Job; its sweep saves its state for resume")
    stop.add_argument("job_id", help="the job id that submit printed (see: tuner jobs)")
    stop.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    stop.add_argument("--no-wait", action="store_true", help="return at once instead of waiting for the job to end")
    stop.set_defaults(handler=cmd_stop)

    resume = commands.add_parser("resume", help="continue an interrupted sweep from its output folder")
    resume.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    resume.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    resume.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    _add_cluster_timeout(resume)
    resume.set_defaults(handler=cmd_resume)

    extend = commands.add_parser(
        "extend", help="run more trials on a sweep that ended, in its folder; the searcher goes on from what it learned"
    )
    extend.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    extend.add_argument("--trials", type=int, required=True, help="how many more trials")
    extend.add_argument("--address", help="join an existing Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    extend.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    _add_cluster_timeout(extend)
    extend.set_defaults(handler=cmd_extend)

    status = commands.add_parser("status", help="the trials of a sweep and the best so far")
    status.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    status.set_defaults(handler=cmd_status)

    best = commands.add_parser("best", help="the best trial's hyperparameters and metrics")
    best.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    best.set_defaults(handler=cmd_best)

    export = commands.add_parser("export", help="(re)write the best model package")
    export.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha")
    export.add_argument("--to", help="destination folder (default: <folder>/best)")
    export.add_argument("--format", choices=["state_dict", "torchscript"], default="state_dict")
    export.add_argument(
        "--overwrite", action="store_true", help="replace a previous export there (only tuner's files are replaced)"
    )
    export.set_defaults(handler=cmd_export)

    predict = commands.add_parser("predict", help="batch predictions of an exported model to CSV")
    predict.add_argument("model_dir", help="an exported model folder, e.g. runs/mnist_asha/best")
    predict.add_argument("--data", required=True, help="mnist:test, fashion_mnist:test, a .npy/IDX file or a folder")
    predict.add_argument("--out", default="predictions.csv", help="CSV to write (default predictions.csv)")
    predict.add_argument("--batch-size", type=int, default=1024)
    predict.set_defaults(handler=cmd_predict)

    serve = commands.add_parser(
        "serve", help="serve a sweep's best model over HTTP with Ray Serve (POST images to /predict)"
    )
    serve.add_argument(
        "source", nargs="?", help="a sweep folder (runs/NAME), an export folder, or models:/NAME/VERSION"
    )
    serve.add_argument("--address", help="a Ray cluster to serve on (default: $RAY_ADDRESS, else a local Ray)")
    serve.add_argument("--host", default="127.0.0.1", help="the address the service listens on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="its port (default 8000)")
    serve.add_argument("--replicas", type=int, default=None, help="replicas of the model (default 1)")
    serve.add_argument("--autoscale", metavar="MIN..MAX", help="replicas from MIN to MAX, by load")
    serve.add_argument("--max-batch-size", type=int, default=32, help="images per model call, at most (default 32)")
    serve.add_argument("--max-images", type=int, default=None, help="images per request, at most (default 256)")
    serve.add_argument("--cpus", type=float, default=1.0, help="CPUs per replica (default 1)")
    serve.add_argument(
        "--tracking-uri", help="MLflow store of a models:/ URI (default: $MLFLOW_TRACKING_URI, runs/mlflow.db)"
    )
    serve.add_argument("--detach", action="store_true", help="on a cluster: leave the service running and return")
    serve.add_argument("--stop", action="store_true", help="stop the tuner service (this machine's, or --address's)")
    serve.add_argument("--verbose", action="store_true", help="show Ray's and Serve's logs")
    serve.set_defaults(handler=cmd_serve)

    report = commands.add_parser(
        "report", help="an HTML report of a sweep (or two side by side) with PNGs; logged to its MLflow run"
    )
    report.add_argument("folder", help="the sweep's output folder, e.g. runs/mnist_asha (finished, running or not)")
    report.add_argument("other", nargs="?", help="a second sweep folder to put beside the first")
    report.add_argument("--out", help="folder for report.html and the PNGs (default: <folder>/report)")
    report.add_argument("--no-mlflow", action="store_true", help="do not log the report to the sweep's MLflow run")
    report.set_defaults(handler=cmd_report)

    ui = commands.add_parser("ui", help="TensorBoard and the MLflow UI on a sweep's outputs")
    ui.add_argument("output", nargs="?", default="runs", help="output folder (runs/) or one sweep's folder")
    ui.add_argument("--host", default="127.0.0.1", help="bind address for both servers (default 127.0.0.1)")
    ui.add_argument("--tensorboard-port", type=int, default=6006)
    ui.add_argument("--mlflow-port", type=int, default=5000)
    ui.set_defaults(handler=cmd_ui)

    validate = commands.add_parser("validate", help="check a sweep file and print the resolved config")
    _add_sweep_file(validate)
    validate.set_defaults(handler=cmd_validate)

    schema = commands.add_parser(
        "schema", help="print the sweep file's JSON Schema (for an editor: python -m tuner schema > tuner.schema.json)"
    )
    schema.set_defaults(handler=cmd_schema)
    return parser


def _load(args: argparse.Namespace):
    from tuner.sweepfile.load import load_sweep

    return load_sweep(args.file, args.overrides, smoke=args.smoke)


def cmd_validate(args: argparse.Namespace) -> int:
    sweep = _load(args)
    print(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False), end="")
    print(f"# {args.file}: valid; search space: {', '.join(sweep.flat_specs()) or '(empty)'}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from tuner.sweepfile.load import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.dry_run:
        return cmd_validate(args)
    from tuner.driver.sweep import run_sweep

    sweep = _load(args)
    outcome = run_sweep(sweep, address=args.address, verbose=args.verbose, **_cluster_timeout(args))
    _print_outcome(sweep, outcome.best, outcome.folder, smoke=args.smoke)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    job = jobs.submit(args.file, args.overrides, smoke=args.smoke, address=args.address, **_cluster_timeout(args))
    address = f" --address {job.address}" if job.address else ""
    print(f"submitted job {job.job_id} to {job.address or 'the cluster'}: {job.entrypoint}")
    print(f"  follow:  ray job logs --follow {job.job_id}{address}")
    print(f"  list:    {tuner_command()} jobs{address}")
    print(f"  stop:    {tuner_command()} stop {job.job_id}{address}   (the sweep saves its state; resume continues it)")
    print(f"  results: in {job.output_dir}/ on the cluster's storage (tuner jobs names the sweep's folder)")
    if args.follow:
        return jobs.follow(job.job_id, args.address or job.address or None, **_cluster_timeout(args))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    rows = jobs.list_jobs(args.address)
    if not rows:
        print("no tuner jobs on this cluster")
        return 0
    width = max(len(row.job_id) for row in rows)
    print(f"{'job':<{width}}  {'status':<10}{'sweep':<20}{'started':<21}folder")
    for row in rows:
        print(f"{row.job_id:<{width}}  {row.status:<10}{row.sweep:<20}{row.started:<21}{row.folder}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    status = jobs.stop(args.job_id, args.address, wait=not args.no_wait)
    print(f"job {args.job_id}: {status}")
    if status == "STOPPED":
        print(f"  its sweep saved its state: continue it with '{tuner_command()} resume FOLDER' or submit FOLDER")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from tuner.driver.sweep import run_sweep
    from tuner.results.summaries import open_sweep

    sweep, folder = open_sweep(args.folder)
    outcome = run_sweep(sweep, address=args.address, verbose=args.verbose, folder=folder, **_cluster_timeout(args))
    _print_outcome(sweep, outcome.best, folder)
    return 0


def cmd_extend(args: argparse.Namespace) -> int:
    from tuner.driver.extend import extend_sweep

    outcome = extend_sweep(
        args.folder, args.trials, address=args.address, verbose=args.verbose, **_cluster_timeout(args)
    )
    from tuner.results.summaries import open_sweep

    sweep, folder = open_sweep(args.folder)
    _print_outcome(sweep, outcome.best, folder)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from tuner.cluster.connect import how_to_continue
    from tuner.results.summaries import best_trial, open_sweep, trial_summaries
    from tuner.results.tables import trials_table

    sweep, folder = open_sweep(args.folder)
    summaries = trial_summaries(sweep, folder)
    print("\n".join(trials_table(sweep, summaries)))
    if any(t.best_value is not None for t in summaries):
        best = best_trial(sweep, folder, summaries)
        print(f"best so far: {best.trial_id} at epoch {best.best_epoch}: {sweep.metric}={best.best_value:.4f}")
        _print_front(sweep, folder)
    hint = how_to_continue(sweep, folder, summaries, args.folder)
    if hint:
        print(hint)
    return 0


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
            print(f"test_accuracy: {metrics['test_accuracy']:.4f} (exported in {_best_where(folder)})")
    _print_front(sweep, folder)
    return 0


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


def cmd_serve(args: argparse.Namespace) -> int:
    from tuner.serving.deploy import Scale, serve_model, stop_service
    from tuner.serving.model import default_tracking_uri

    if args.stop:
        if args.source:
            raise TunerError(f"serve --stop: takes no model ({args.source!r}); it stops the running service")
        return stop_service(address=args.address, port=args.port)
    if not args.source:
        raise TunerError("serve: give a sweep folder (runs/NAME), an export folder or models:/NAME/VERSION")
    if args.max_images is not None and args.max_images < 1:
        raise TunerError(f"serve --max-images: at least 1, but got {args.max_images}")
    return serve_model(
        args.source,
        address=args.address,
        host=args.host,
        port=args.port or 8000,
        scale=Scale.parse(args.replicas, args.autoscale),
        max_batch_size=args.max_batch_size,
        max_images=args.max_images,
        cpus=args.cpus,
        tracking_uri=args.tracking_uri or default_tracking_uri(),
        detach=args.detach,
        verbose=args.verbose,
    )


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


def _print_front(sweep: Any, folder: Any) -> None:
    """Several objectives: the Pareto front and the point the sweep's rule takes."""
    if sweep.objectives:
        from tuner.folder.records import trial_histories
        from tuner.results.front import front_lines

        print("\n".join(front_lines(sweep, trial_histories(folder))))


def _best_where(folder: Any) -> str:
    """Where a sweep's best/ is, as users reach it: at its URI, else on disk."""
    from tuner.folder.remote import join

    return join(folder.remote, "best") if folder.remote else str(folder.best)


def _print_outcome(sweep: Any, metrics: dict[str, Any], folder: Any, *, smoke: bool = False) -> None:
    from tuner.results.tables import best_lines

    best = folder.best
    hyper = yaml.safe_load((best / "config.yaml").read_text())["hyperparameters"]
    print()
    print("\n".join(best_lines(sweep, metrics, hyper)))
    print(f"  exported to {_best_where(folder)}")
    if stalled := _stalled(folder):
        print(f"  stalled: {stalled}; their threads' stacks: tune/<trial>/stall-stacks.txt")
    if sweep.objectives and not folder.remote:
        _print_front(sweep, folder)
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
    from tuner.folder import records
    from tuner.tracking.mlflow_runs import tracking_uri

    return records.read_mlflow_state(folder).get("tracking_uri") or tracking_uri(sweep)


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


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has closed it."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader gone away is met here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():  # another pipe (a server's, a child's): not this one
            raise
        # ``tuner best runs/x | head -2``: the reader has what it wanted. Exit quietly, as
        # ``git log | head`` does; what is still buffered for stdout goes to os.devnull.
        from tuner.driver.progress import quiet_stdout

        quiet_stdout()
        return 0
    except TunerError as error:
        if args.debug:
            raise
        print(f"tuner: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        from tuner.folder.store import MACHINE_ERRNOS

        if args.debug or error.errno not in MACHINE_ERRNOS:  # the machine refused a write or a read
            raise
        where = f"{error.filename}: " if error.filename else ""
        print(f"tuner: error: {where}{error.strerror}; what was recorded before it is kept", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as error:
        from tuner.driver.signals import SweepInterrupted

        if not isinstance(error, SweepInterrupted):
            raise
        print(f"tuner: {error}; continue it with: {tuner_command()} resume {error.folder}", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """``python -m tuner`` and the ``tuner`` script: main(), then the process ends."""
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with ``code``, skipping Python's last garbage collection at exit.

    That collection walks every object Ray, Tune, torch and MLflow made, to free memory the
    OS takes back anyway: 2.2 s after a small sweep on 2 cores, 0.3 s frozen. Exit handlers
    (Ray's shutdown, MLflow's, logging's) and the flush of stdout and stderr still run; what
    tuner writes is closed before main() returns.
    """
    gc.freeze()
    sys.exit(code)
