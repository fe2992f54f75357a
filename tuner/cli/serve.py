"""A sweep's model as an HTTP service on Ray Serve: ``serve`` (tuner.serving.deploy), its
parser above its handler."""

from __future__ import annotations

import argparse

from tuner.cli.common import Commands
from tuner.errors import TunerError


def register(commands: Commands) -> None:
    commands.update(serve=_add_serve)


def _add_serve(commands: argparse._SubParsersAction) -> None:
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
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="a line a request in each replica's Serve log (default off; a request that raises is logged)",
    )
    serve.add_argument("--verbose", action="store_true", help="show Ray's and Serve's logs")
    serve.set_defaults(handler=cmd_serve)


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
        access_log=args.access_log,
        verbose=args.verbose,
    )
