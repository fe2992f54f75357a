"""``tuner serve``: a sweep's model as a Ray Serve application on a local Ray or a cluster.

In the foreground (the default) the command holds the service until Ctrl-C, SIGTERM or
``tuner serve --stop`` from another terminal, then deletes the application, shuts Serve
down when no other application is left, and stops the local Ray it started: nothing is
left running. ``--detach`` (on a cluster) leaves the service there after the command
ends, until ``tuner serve --stop --address ...``.

One tuner service per Ray (the application ``tuner`` at route ``/``): a second one is
refused, never silently put in the first one's place. A running foreground service is
recorded in a small file per port (``state_file``) that ``--stop`` reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.invocation import tuner_command

APP_NAME = "tuner"
STOP_WAIT_S = 60.0


@dataclass(frozen=True)
class Scale:
    replicas: int = 1
    autoscale: tuple[int, int] | None = None  # (min, max) replicas

    @classmethod
    def parse(cls, replicas: int | None, autoscale: str | None) -> Scale:
        if replicas is not None and autoscale is not None:
            raise TunerError("serve: give --replicas N or --autoscale MIN..MAX, not both")
        if autoscale is None:
            if replicas is not None and replicas < 1:
                raise TunerError(f"serve --replicas: at least 1, but got {replicas}")
            return cls(replicas or 1)
        low, sep, high = autoscale.partition("..")
        if not (sep and low.isdigit() and high.isdigit() and 0 <= int(low) <= int(high) and int(high) >= 1):
            raise TunerError(
                f"serve --autoscale: MIN..MAX with 0 <= MIN <= MAX and MAX >= 1, e.g. 1..4, but got {autoscale!r}"
            )
        return cls(autoscale=(int(low), int(high)))

    def options(self) -> dict[str, Any]:
        if self.autoscale is None:
            return {"num_replicas": self.replicas}
        low, high = self.autoscale
        return {
            "autoscaling_config": {
                "min_replicas": low,
                "initial_replicas": max(low, 1),
                "max_replicas": high,
                "target_ongoing_requests": 16,
            }
        }

    def describe(self) -> str:
        if self.autoscale is None:
            return f"{self.replicas} replica(s)"
        return f"{self.autoscale[0]} to {self.autoscale[1]} replicas, by load"


def serve_model(
    source: str,
    *,
    address: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    scale: Scale = Scale(),
    max_batch_size: int = 32,
    max_images: int | None = None,
    cpus: float = 1.0,
    tracking_uri: str | None = None,
    detach: bool = False,
    access_log: bool = False,
    verbose: bool = False,
) -> int:
    from tuner.serving.inputs import MAX_BYTES, MAX_IMAGES
    from tuner.serving.model import bundle

    if max_batch_size < 1:
        raise TunerError(f"serve --max-batch-size: at least 1, but got {max_batch_size}")
    if not 1 <= port <= 65535:
        raise TunerError(f"serve --port: 1-65535, but got {port}")
    address = address or os.environ.get("RAY_ADDRESS")
    if detach and not address:
        raise TunerError("serve --detach: a service outlives this command only on a cluster (--address)")
    served = bundle(source, tracking_uri=tracking_uri)  # checked here, before Ray starts
    if not address:
        _check_port_free(host, port)
        _haproxy_ingress()
    limits = {"max_bytes": MAX_BYTES, "max_images": max_images or MAX_IMAGES}

    from tuner.cluster.connect import start_ray, stop_ray

    started = start_ray(address, verbose=verbose)
    if not verbose:  # Serve's INFO lines (starting, app ready): what they say is printed below
        import logging

        import ray.serve  # noqa: F401 (it sets its logger up when imported)

        logging.getLogger("ray.serve").setLevel(logging.WARNING)
    deployed = False
    try:
        with contextlib.ExitStack() as holding:
            if not detach:  # --stop finds it (from the start: a stop while it deploys stops it too)
                holding.enter_context(_recorded(host, port, address))
                holding.enter_context(_sigterm_as_interrupt())
            if APP_NAME in _applications():  # another's: never taken down or replaced
                raise TunerError(
                    f"a tuner service already runs on this Ray ({address or 'the local Ray'}); stop it first: "
                    f"{tuner_command()} serve --stop{f' --address {address}' if address else ''}"
                )
            deployed = True  # from here on, what is half made is taken down
            _deploy(served, host, port, scale, max_batch_size, limits, cpus, access_log)
            if detach:
                stop = f"{tuner_command()} serve --stop --address {address}"
                print(f"  left running on the cluster; stop it with: {stop}")
                deployed = False  # the service stays
                return 0
            print(f"  Ctrl-C (or {tuner_command()} serve --stop) stops it", flush=True)
            _wait_for_stop()
        return 0
    except KeyboardInterrupt:  # Ctrl-C or --stop while it was still deploying: stopped as asked
        print("\nstopping the service ...", flush=True)
        return 0
    finally:
        if deployed:
            _take_down(ray_goes_too=started)
            print("service stopped", flush=True)
        if started:
            stop_ray()


def _deploy(
    served: Any, host: str, port: int, scale: Scale, max_batch_size: int, limits: dict, cpus: float, access_log: bool
) -> None:
    """The application on the joined Ray, ready; prints where. Serve's access log (a line a
    request, formatted and written by the replica between two requests) is off unless
    asked for: with the light CNN at 32 clients it took 7% of the replica's busy time
    (py-spy, benchmarks/README.md). A request whose code raises is logged with its
    traceback either way."""
    from ray import serve

    serve.start(proxy_location="HeadOnly", http_options={"host": host, "port": port})
    from tuner.serving.app import ModelService

    # No runtime_env of its own: Serve gives the replicas this driver's, which ships tuner
    # to a cluster's nodes (start_ray); Ray refuses a local path in an actor's runtime_env.
    actor: dict[str, Any] = {"num_cpus": cpus}
    logs = {"enable_access_log": access_log}
    app = ModelService.options(**scale.options(), logging_config=logs, ray_actor_options=actor).bind(
        served, max_batch_size, limits
    )
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    trial = served.info.get("trial_id")
    print(f"serving {served.info.get('source')}" + (f" (trial {trial})" if trial else "") + f" at {url}/predict")
    print(
        f"  {scale.describe()}, batches of up to {max_batch_size} image(s); "
        f"API docs at {url}/docs; health at {url}/healthz",
        flush=True,
    )


def stop_service(*, address: str | None = None, port: int | None = None) -> int:
    """``tuner serve --stop``: the foreground service of this machine (by its record) is
    sent SIGTERM, which it takes as Ctrl-C; with ``--address``, the application on that cluster is
    deleted (a detached one included)."""
    address = address or os.environ.get("RAY_ADDRESS")
    records = _records(port)
    if records and not address:
        for record in records:
            _stop_process(record)
        return 0
    if not address:
        which = f" on port {port}" if port else ""
        raise TunerError(
            f"serve --stop: no tuner service{which} runs from this machine; for one on a cluster add --address"
        )
    import ray

    from tuner.cluster.connect import start_ray

    start_ray(address)
    try:
        if APP_NAME not in _applications():
            raise TunerError(f"serve --stop: no tuner service runs on {address}")
        _take_down()
        print(f"stopped the tuner service on {address}")
    finally:
        ray.shutdown()
    return 0


def _applications() -> set[str]:
    from ray import serve

    try:
        return set(serve.status().applications)
    except Exception:  # Serve not started on this Ray: no application
        return set()


def _take_down(*, ray_goes_too: bool = False) -> None:
    """The application (its replicas stopped gracefully), and Serve itself when nothing
    else is served; a local Ray about to stop takes Serve's actors with it."""
    from ray import serve

    with contextlib.suppress(Exception):
        serve.delete(APP_NAME)
    if not ray_goes_too and not _applications():
        serve.shutdown()


def _haproxy_ingress() -> None:
    """Serve's HAProxy ingress in place of its Python proxy, on the Ray this command starts:
    HAProxy passes each request straight to a replica's own HTTP server (Serve's direct
    ingress), where the proxy added a Python hop and a Ray call (light CNN, 32 clients:
    1,168 requests/s against 268, benchmarks/README.md). Ray's processes read these when
    they start; the replicas listen on ``--host`` too. HAProxy's stats page and Prometheus
    endpoint listen on every interface, and a fallback proxy (for when no replica is up)
    on ``--host``: they get free ports, as with their fixed defaults (8404, 9101, 8500) a
    second service on the machine was refused, or shared the first one's fallback proxy
    (Serve binds it with SO_REUSEPORT). ``RAY_SERVE_ENABLE_HA_PROXY=0``
    keeps Serve's own proxy. A cluster joined by address keeps the ingress it was started
    with.

    A replica behind it stays open for a draining period before it stops, so that a load
    balancer outside can take it out first: 30 s by default, which every stop (Ctrl-C,
    ``--stop``, SIGTERM) would wait. This HAProxy is Serve's own and is told at once: 2 s."""
    if os.environ.setdefault("RAY_SERVE_ENABLE_HA_PROXY", "1") != "1":
        return
    # The replica's methods on the event loop of its HTTP server, not on a loop of their own
    # in another thread (Serve's default): no hand-over between threads a request (1.17-1.35x
    # the requests/s at 32 clients in 3 alternated pairs, benchmarks/README.md, where the
    # machine's own drift is as large). The model's call still runs in a thread of its own
    # (ModelService.classify), so the loop keeps reading requests.
    os.environ.setdefault("RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD", "0")
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "2")
    from tuner.trial.command_process import free_port

    ports = ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT", "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT")
    for name in ports:
        if name not in os.environ:
            os.environ[name] = str(free_port(""))  # free on every interface, where HAProxy binds two of them


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            holder = next(iter(_records(port)), None)
            if holder is not None:  # our own service: say so, and how to end it
                raise TunerError(
                    f"serve --port {port}: a tuner service (process {holder['pid']}) already listens on "
                    f"{holder['host']}:{port}; stop it with: {tuner_command()} serve --stop --port {port} "
                    "(or Ctrl-C where it runs), or give another --port"
                ) from None
            raise TunerError(
                f"serve --port {port}: cannot listen on {host}:{port} ({error.strerror}); give another --port"
            ) from None


def _wait_for_stop() -> None:
    """Until Ctrl-C or SIGTERM (both a KeyboardInterrupt here)."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("\nstopping the service ...", flush=True)


@contextlib.contextmanager
def _sigterm_as_interrupt():
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the record --stop reads -------------------------------------------------------------------
def state_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"tuner-serve-{os.getuid()}"


@contextlib.contextmanager
def _recorded(host: str, port: int, address: str | None):
    folder = state_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    record = folder / f"{port}.json"
    record.write_text(json.dumps({"pid": os.getpid(), "host": host, "port": port, "address": address}))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if json.loads(record.read_text()).get("pid") == os.getpid():
                record.unlink()


def _records(port: int | None) -> list[dict[str, Any]]:
    folder = state_dir()
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            running = _alive(int(record["pid"]))
        except (OSError, ValueError, KeyError):
            running = False
        if not running:
            path.unlink(missing_ok=True)  # a service that died without cleaning up
            continue
        if port is None or record.get("port") == port:
            found.append(record)
    return found


def _stop_process(record: dict[str, Any]) -> None:
    pid = int(record["pid"])
    # SIGTERM, handled as Ctrl-C: a service started in the background of a script (`&`)
    # inherits SIGINT ignored, and would never see one.
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"stopped the tuner service on {record['host']}:{record['port']} (process {pid})")
            return
        time.sleep(0.2)
    raise TunerError(
        f"serve --stop: the service on port {record['port']} (process {pid}) did not stop in {STOP_WAIT_S:.0f} s"
    )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one its parent has not reaped yet does not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: alive as far as kill says
    return state not in ("Z", "X")
