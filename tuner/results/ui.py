"""``tuner ui``: TensorBoard on the sweep logs and the MLflow UI on the store, together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import TunerError
from tuner.folder.records import read_mlflow_state
from tuner.folder.store import SweepFolder


@dataclass(frozen=True)
class UiTargets:
    logdir: Path  # TensorBoard's --logdir
    tracking_uri: str  # MLflow's --backend-store-uri


def find_targets(output: Path) -> UiTargets:
    """An output folder (``runs/``) or one sweep's folder (``runs/<name>/``)."""
    output = output.expanduser().resolve()
    if not output.is_dir():
        raise TunerError(f"{output}: no such folder; give an output folder such as runs/ or runs/<sweep name>/")
    folder = SweepFolder(output)
    if folder.mlflow_state.is_file():  # a single sweep
        uri = read_mlflow_state(folder).get("tracking_uri")
        if not uri:
            raise TunerError(f"{folder.mlflow_state}: not a readable MLflow run map (no tracking_uri)")
        return UiTargets(folder.tune, uri)
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{output / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise TunerError(f"{output}: no mlflow.db here; run a sweep with output_dir={output} first")
    return UiTargets(output, uri)


def _die_with_parent() -> None:
    """In the child: get SIGTERM if ``tuner ui`` dies, even by SIGKILL (Linux prctl)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: Ctrl-C and SIGTERM still stop both


def _wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise TunerError(f"{url}: the server exited with code {process.returncode} before it answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TunerError(f"{url}: no answer after {timeout_s:.0f} s")


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def serve(output: Path, *, host: str, tensorboard_port: int, mlflow_port: int) -> int:
    """Start both servers, print their URLs, and stop both cleanly on Ctrl-C (or SIGTERM)."""
    targets = find_targets(output)
    commands = {
        "TensorBoard": [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(targets.logdir),
            "--host",
            host,
            "--port",
            str(tensorboard_port),
        ],
        "MLflow": [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            targets.tracking_uri,
            "--host",
            host,
            "--port",
            str(mlflow_port),
            "--workers",
            "1",
        ],
    }
    urls = {"TensorBoard": f"http://{host}:{tensorboard_port}/", "MLflow": f"http://{host}:{mlflow_port}/"}
    processes: list[subprocess.Popen] = []
    # Browsing runs needs no GenAI job runners (MLflow starts seven worker processes).
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Ctrl-C must stop both even when we were started from a background job, whose
    # SIGINT the shell sets to "ignore" (and Python then keeps ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for command in commands.values():  # own process groups: Ctrl-C reaches us, we stop them
            processes.append(
                subprocess.Popen(
                    command,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                    env=env,
                )
            )
        for (name, url), process in zip(urls.items(), processes, strict=True):
            _wait_until_up(url, process)
            print(f"{name}: {url}", flush=True)
        print("Ctrl-C stops both.", flush=True)
        while all(p.poll() is None for p in processes):
            time.sleep(0.5)
        failed = next(p for p in processes if p.poll() is not None)
        stderr = failed.stderr.read().decode(errors="replace").strip().splitlines()[-1:] if failed.stderr else []
        raise TunerError(f"a UI server stopped (exit {failed.returncode}): {' '.join(stderr)}")
    except KeyboardInterrupt:
        print("stopping TensorBoard and MLflow", flush=True)
        return 0
    finally:
        _stop(processes)
