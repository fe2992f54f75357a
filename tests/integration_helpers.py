"""Shared pieces of the integration tests: data root, a small sweep, leak checks."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from conftest import SHARED_DATA, require


def data_root() -> Path:
    """../shared/data when it is there (CI, this repo's machines), else $TUNER_DATA_DIR."""
    root = Path(os.environ.get("TUNER_DATA_DIR") or SHARED_DATA)
    require((root / "MNIST" / "raw").is_dir(), f"real MNIST not found under {root}; set TUNER_DATA_DIR")
    return root


def small_sweep(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A sweep dict on a few thousand real MNIST images; sections override the defaults."""
    base: dict[str, Any] = {
        "name": "it",
        "output_dir": str(tmp_path / "runs"),
        "data": {"dataset": "mnist", "root": str(data_root()), "train_subset": 3000, "download": False},
        "model": {"name": "cnn", "conv1": 8, "conv2": 16, "hidden": 64},
        "train": {"epochs": 2, "batch_size": 64, "lr": 2e-3},
        "trials": {"num_samples": 2},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


# Detached singletons Ray itself keeps, one per cluster (not per trial): not leaks.
# Ray Data keeps its _StatsActor once a data set has run (a user's own images are decoded
# with Ray Data).
RAY_SINGLETONS = {"_AutoscalingCoordinatorActor", "_StatsActor"}


def assert_no_leaks(timeout_s: float = 60.0) -> None:
    """No placement group or actor may outlive a sweep (stopped trials must free workers)."""
    import ray
    from ray.util.state import list_actors

    deadline = time.monotonic() + timeout_s
    while True:
        groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
        # This driver's own cluster, by address: with none given, the state API looks for
        # every Ray on the machine and refuses when it finds more than one.
        actors = list_actors(
            address=ray.get_runtime_context().gcs_address,
            filters=[("state", "=", "ALIVE")],
            raise_on_missing_output=False,
        )
        actors = [a for a in actors if a.class_name not in RAY_SINGLETONS]
        if not groups and all(a.class_name == "PlacementGroupCleaner" for a in actors):
            # Ray Train's detached watchdog of a Train run's group exits once it has seen its
            # controller dead through the state API, which it asks without an address: while
            # another Ray runs on the machine (CI's other test worker) it cannot, and it stays,
            # holding nothing, until its Ray stops. With every group gone it is no leak of tuner's.
            return
        if time.monotonic() > deadline:
            names = sorted(a.class_name for a in actors)
            raise AssertionError(f"left after the sweep: {len(groups)} placement group(s), actors {names}")
        time.sleep(1.0)


def recorded_sweep(tmp_path: Path, trials: int = 2) -> tuple[Path, Any]:
    """A real MLflow store written through tuner.tracking (no Ray): a parent and ``trials`` children."""
    from tuner.folder.store import SweepFolder
    from tuner.sweepfile.schema import SweepConfig
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate({"name": "ui_check", "output_dir": str(tmp_path / "runs")})
    sweep_dir = tmp_path / "runs" / "ui_check"
    (sweep_dir / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, SweepFolder(sweep_dir))
    for index in range(trials):
        trial_id = f"abcde_{index:05d}"
        for epoch in (1, 2):
            result = {"training_iteration": epoch, "val_accuracy": 0.5 + 0.1 * epoch, "val_loss": 1.0 / epoch}
            record.log_result(trial_id, {"lr": 0.001 * (index + 1)}, result)
        record.end_trial(trial_id, {"lr": 0.001 * (index + 1)}, "finished")
    return tmp_path / "runs", record


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_ui(output: Path):
    """``python -m tuner ui`` in a subprocess; yields (process, mlflow_url, tensorboard_url)."""
    import signal
    import subprocess
    import sys
    import urllib.request

    tb_port, mlflow_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner",
            "ui",
            str(output),
            "--tensorboard-port",
            str(tb_port),
            "--mlflow-port",
            str(mlflow_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    mlflow_url, tb_url = f"http://127.0.0.1:{mlflow_port}", f"http://127.0.0.1:{tb_port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(mlflow_url, timeout=2)
                urllib.request.urlopen(tb_url, timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"tuner ui did not come up: {process.communicate(timeout=30)}") from None
                time.sleep(0.5)
        yield process, mlflow_url, tb_url
    finally:
        if process.poll() is None:  # a failed test: Ctrl-C it, so it stops its two servers
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- sweeps as a user runs them: the CLI in a subprocess -------------------------------------
def users_sweep(tmp_path: Path, files: dict[str, str], sweep: dict[str, Any]) -> Path:
    """A user's folder that tuner never saw (``tmp_path/my_project``) with their ``files`` and
    the sweep file ``<name>.yaml``, its output in ``tmp_path/runs``; the sweep file's path."""
    folder = tmp_path / "my_project"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    path = folder / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "runs"), **sweep}, sort_keys=False))
    return path


FAULT_LAUNCHER = Path(__file__).parent / "support" / "tuner_with_fault.py"


def _tuner_command(args: tuple[str, ...], fail_once_at: tuple[int, Path] | None) -> list[str]:
    """``python -m tuner ARGS``; with ``fail_once_at=(epoch, marker_dir)``, every trial fails
    once after that epoch (tuner.trial.testing.FailOnceAt) and retries from its checkpoint."""
    if fail_once_at is None:
        return [sys.executable, "-m", "tuner", *args]
    epoch, marker_dir = fail_once_at
    return [sys.executable, str(FAULT_LAUNCHER), str(epoch), str(marker_dir), *args]


def tuner_cli(
    *args: str,
    timeout: float = 900,
    env: dict[str, str] | None = None,
    fail_once_at: tuple[int, Path] | None = None,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        _tuner_command(args, fail_once_at),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_sweep(
    sweep_file: Path, env: dict[str, str] | None = None, fail_once_at: tuple[int, Path] | None = None
) -> subprocess.Popen:
    return subprocess.Popen(
        _tuner_command(("sweep", str(sweep_file)), fail_once_at),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the kill takes Ray's processes with it
        env={**os.environ, **(env or {})},
    )


def wait_for_results(sweep_root: Path, count: int, process: subprocess.Popen, timeout_s: float = 600) -> None:
    """Until ``count`` epochs in all have been reported (the sweep's history log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = sum(len(p.read_text().splitlines()) for p in sweep_root.glob("history/*.jsonl"))
        if lines >= count:
            return
        if process.poll() is not None:
            raise AssertionError(f"the sweep ended early: {process.communicate()}")
        time.sleep(0.5)
    raise AssertionError("no result in time")


def kill_ray_under(folder: Path, timeout_s: float = 30.0) -> None:
    """SIGKILL the Ray a killed sweep orphaned under the temp dir ``folder`` (its own
    ``RAY_TMPDIR``), and wait until every one of those processes is gone. The GCS, raylet and
    dashboard name the folder on their command lines; trial processes (``ray::...``) do not, but
    inherit ``RAY_TMPDIR``. Left alive, a trial process went on writing into the sweep's folder
    for a while after the kill (seen on a loaded machine: the folder the test had just moved
    appeared again)."""
    marks = (str(folder).encode(), f"RAY_TMPDIR={folder}".encode())

    def orphans() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if marks[0] in cmdline or marks[1] + b"\0" in environ + b"\0":
                found.append(int(entry.name))
        return found

    deadline = time.monotonic() + timeout_s
    while pids := orphans():
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the Ray under {folder} still alive: {pids}")
        time.sleep(0.2)


def mlflow_children(sweep_root: Path, metric: str = "val_accuracy") -> dict[str, list[int]]:
    """The MLflow trial runs under this sweep folder's parent run: trial id -> ``metric``'s steps."""
    from mlflow.tracking import MlflowClient

    state = json.loads((sweep_root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    parent = state["parent_run_id"]
    runs = client.search_runs(
        [state["experiment_id"]], f"tags.tuner.kind = 'trial' and tags.mlflow.parentRunId = '{parent}'"
    )
    steps = {}
    for run in runs:
        trial_id = run.data.tags["tuner.trial_id"]
        assert trial_id not in steps, f"two MLflow runs for trial {trial_id}"
        assert run.data.tags["mlflow.parentRunId"] == state["parent_run_id"]
        steps[trial_id] = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
    return steps


# --- clusters of our own: several Ray nodes on this machine --------------------------------
def venv_env(**extra: str) -> dict[str, str]:
    """The environment for Ray nodes a test starts: this venv's ``python`` first on PATH, since
    a Ray Job's entrypoint runs with the PATH of the process that started the node."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_ADDRESS": "", **extra}


@dataclasses.dataclass
class RayNode:
    process: subprocess.Popen  # `ray start --block`: its process group holds the node's Ray processes
    node_id: str
    head: bool


class RayStartCluster:
    """A Ray cluster made as users make one on a machine: ``ray start --head --block`` and
    ``ray start --block --address=...`` in separate processes, token auth on, the dashboard
    on 127.0.0.1, every node in one temp dir (two ``ray start`` on one host share /tmp/ray
    by default; here a folder of the test's own). Waits for real conditions (the dashboard
    answering, a node registered or gone) under one limit, never a fixed sleep. Stops only
    its own processes: each node's process group, by the ``ray start`` process's id, and the
    job drivers it ran, by the process ids Ray reports for them."""

    def __init__(self, temp_dir: Path, *, limit_s: float = 300.0):
        self.temp_dir, self.limit_s = temp_dir, limit_s
        self.token = os.urandom(32).hex()
        self.nodes: list[RayNode] = []
        self.port = self.dashboard_port = 0
        self.ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"

    @property
    def env(self) -> dict[str, str]:
        """For every process of the cluster and every client of it: nodes, drivers, CLIs."""
        return venv_env(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            # A lost node is noticed within seconds, as in Ray's own node-loss tests.
            RAY_health_check_period_ms="1000",
            RAY_health_check_failure_threshold="5",
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start_head(self, num_cpus: int = 1) -> RayNode:
        self.port, self.dashboard_port = free_port(), free_port()
        self.nodes = []
        head = self._start(
            [
                "--head",
                f"--port={self.port}",
                f"--num-cpus={num_cpus}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}",  # not 10001: another test's head may hold it
            ],
            head=True,
        )
        return head

    def add_worker(self, num_cpus: int = 1) -> RayNode:
        return self._start([f"--address={self.address}", f"--num-cpus={num_cpus}"], head=False)

    def _start(self, args: list[str], *, head: bool) -> RayNode:
        known = {node.node_id for node in self.nodes}
        log = open(self.temp_dir / f"ray-start-{len(self.nodes)}-{time.time_ns()}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [
                self.ray_bin,
                "start",
                "--block",
                "--node-ip-address=127.0.0.1",
                "--dashboard-agent-listen-port=0",
                "--min-worker-port=0",
                "--max-worker-port=0",
                "--disable-usage-stats",
                f"--temp-dir={self.temp_dir}",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the node's Ray processes, killed together
            env=self.env,
        )
        log.close()

        def registered() -> str | None:
            assert process.poll() is None, (
                f"ray start exited {process.returncode}: {Path(log.name).read_text()[-3000:]}"
            )
            new = [n for n in self.alive_nodes() if n["node_id"] not in known and n["is_head_node"] == head]
            return new[0]["node_id"] if new else None

        node = RayNode(process, self.wait_for(registered, "the node to register"), head)
        self.nodes.append(node)
        return node

    def wait_for(self, condition: Any, what: str) -> Any:
        """``condition()``'s first truthy value, asked every half second within the cluster's limit."""
        deadline = time.monotonic() + self.limit_s
        while True:
            value = condition()
            if value:
                return value
            assert time.monotonic() < deadline, f"waited {self.limit_s:.0f} s for {what}"
            time.sleep(0.5)

    def api(self, path: str) -> Any:
        """The dashboard's JSON at ``path`` (with the cluster's token), else None."""
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.dashboard + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):  # not up yet, restarting, gone
            return None

    def alive_nodes(self) -> list[dict[str, Any]]:
        answer = self.api("/api/v0/nodes?limit=100")
        nodes = answer["data"]["result"]["result"] if answer and answer.get("result") else []
        return [node for node in nodes if node["state"] == "ALIVE"]

    def kill(self, node: RayNode) -> None:
        """SIGKILL every process of the node, as a lost machine: the ``ray start`` process's
        session (raylet, GCS, agents, and the workers, which Ray puts in process groups of
        their own). A job's driver has a session of its own: see ``job_driver_pids``."""
        for pid in session_pids(node.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(timeout=60)
        self.nodes.remove(node)
        if not node.head:
            self.wait_for(
                lambda: node.node_id not in {n["node_id"] for n in self.alive_nodes()}, "Ray to see the node gone"
            )

    def job_driver_pids(self) -> list[int]:
        """The process ids of the job drivers this cluster started (Ray reports them)."""
        jobs = self.api("/api/jobs/") or []
        return [int(job["driver_info"]["pid"]) for job in jobs if (job.get("driver_info") or {}).get("pid")]

    def shutdown(self) -> None:
        """Every node, head last, and any job driver still running (they outlive their node)."""
        drivers = self.job_driver_pids() if self.nodes else []
        for node in sorted(self.nodes, key=lambda n: n.head):
            self.kill(node)
        for pid in drivers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def session_pids(session: int) -> list[int]:
    """The processes of a session (its leader's pid), from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == session:  # after the name: state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


@contextlib.contextmanager
def ray_start_cluster(temp_dir: Path, *, head_cpus: int = 1, workers: int = 1, worker_cpus: int = 1):
    """A head and ``workers`` worker nodes as separate ``ray start`` processes; stopped at the end."""
    cluster = RayStartCluster(temp_dir)
    try:
        cluster.start_head(head_cpus)
        for _ in range(workers):
            cluster.add_worker(worker_cpus)
        yield cluster
    finally:
        cluster.shutdown()


PROBE_LEAKS = """
import sys
sys.path.insert(0, {tests!r})
import ray
ray.init(address={address!r}, log_to_driver=False)
from integration_helpers import assert_no_leaks
assert_no_leaks()
print("no leaks")
"""


def assert_no_leaks_on(address: str, env: dict[str, str] | None = None) -> None:
    """assert_no_leaks from a fresh driver joined to the cluster at ``address`` (a client sends
    the cluster's token only in token mode)."""
    probe = PROBE_LEAKS.format(tests=str(Path(__file__).parent), address=address)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_ADDRESS": "", **(env or {})},
    )
    assert done.returncode == 0 and "no leaks" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]


# --- object storage of our own: a real S3 API on 127.0.0.1 ----------------------------------
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def s3_server(bucket: str = "tuner-test"):
    """moto's S3 server on a free local port with one bucket; yields ``uri(folder)``, an
    ``s3://`` URI that pyarrow (and so Ray Tune and tuner) opens. The credentials it takes
    are set in os.environ while it runs, so that Ray nodes started meanwhile have them."""
    import pytest

    pytest.importorskip("moto", reason="moto[server] (the dev extra) serves S3 on 127.0.0.1")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("moto's S3 server did not start") from None
                time.sleep(0.3)
        import boto3

        with pytest.MonkeyPatch.context() as patch:
            for key, value in S3_CREDENTIALS.items():
                patch.setenv(key, value)
            boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}").create_bucket(Bucket=bucket)
            yield lambda folder: f"s3://{bucket}/{folder}?endpoint_override=127.0.0.1:{port}&scheme=http"
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextlib.contextmanager
def busy_cpus(count: int):
    """``count`` processes spinning on a CPU each (a machine busy with other work), stopped
    by their process ids at the end."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=30)


# --- a tiny trained CNN, exported as export_best would (predict and serve tests) ----------------
MODEL_OPTIONS = {"conv1": 8, "conv2": 16, "hidden": 32, "dropout": 0.25, "fc_dropout": 0.5}
TRAIN = {
    "epochs": 1,
    "batch_size": 64,
    "lr": 2e-3,
    "optimizer": "adam",
    "momentum": 0.9,
    "weight_decay": 0.0,
    "lr_schedule": "constant",
    "label_smoothing": 0.0,
    "amp": False,
}


def mnist_description() -> dict:
    """MNIST as an export's config.yaml describes its data (shape, classes, normalisation)."""
    from tuner.data.datasets import DATASETS

    info = DATASETS["mnist"]
    return {
        "dataset": "mnist",
        "channels": info.channels,
        "size": info.size,
        "num_classes": info.num_classes,
        "mean": list(info.mean),
        "std": list(info.std),
    }


def export_config(format: str, sweep: str = "predict_test") -> dict:
    """The shape ``export_best`` writes to config.yaml."""
    return {
        "sweep": sweep,
        "trial_id": "trial_00000",
        "epoch": 1,
        "hyperparameters": {"lr": TRAIN["lr"], "hidden": MODEL_OPTIONS["hidden"]},
        "model": {"name": "cnn", "options": dict(MODEL_OPTIONS)},
        "train": dict(TRAIN),
        "data": mnist_description(),
        "metric": {"name": "val_accuracy", "mode": "max"},
        "format": format,
    }


def train_tiny_cnn(images: Any, labels: Any) -> Any:
    """The CNN of MODEL_OPTIONS after one epoch on ``images`` (uint8 [N, 1, 28, 28])."""
    import numpy as np
    import torch

    from tuner.data.datasets import DATASETS, normalise
    from tuner.models.builtin import MnistCnn

    info = DATASETS["mnist"]
    torch.manual_seed(0)
    model = MnistCnn(info.channels, info.num_classes, info.size, **MODEL_OPTIONS)
    optimizer = torch.optim.Adam(model.parameters(), lr=TRAIN["lr"])
    order = torch.randperm(len(labels))
    x_all, y_all = torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels)
    model.train()
    for begin in range(0, len(order), TRAIN["batch_size"]):
        batch = order[begin : begin + TRAIN["batch_size"]]
        loss = torch.nn.functional.cross_entropy(model(normalise(x_all[batch], info.mean, info.std)), y_all[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


# --- HTTP against a served model --------------------------------------------------------------
def http_get(url: str) -> tuple[int, dict]:
    """Status and JSON answer of a GET."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.status, json.loads(answer.read())


def http_post(url: str, body: bytes, content_type: str | None) -> tuple[int, dict]:
    """Status and JSON answer of a POST, a refusal's included."""
    request = urllib.request.Request(url, data=body, method="POST")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        text = refused.read()
        try:
            return refused.code, json.loads(text or b"{}")
        except ValueError:  # a 500 from Serve itself (a replica lost mid-request): text
            return refused.code, {"error": text.decode(errors="replace")}


def png_bytes(array: Any) -> bytes:
    """A uint8 [H, W] array as PNG bytes."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def write_mnist_parquet(folder: Path, train_rows: int, test_rows: int) -> Path:
    """Real MNIST digits as one Parquet table, as examples/spark_mnist/make_parquet.py
    writes it: ``image`` (PNG bytes), ``label`` (int64), ``split`` (train or test)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tuner.data.datasets import load_test_split

    folder.mkdir(parents=True)
    for split, count in (("train", train_rows), ("test", test_rows)):
        data = load_test_split("mnist", str(data_root()), train=split == "train", download=False)
        table = pa.table(
            {
                "image": [png_bytes(data.images[i, 0]) for i in range(count)],
                "label": data.labels[:count].astype(np.int64),
                "split": [split] * count,
            }
        )
        pq.write_table(table, folder / f"{split}.parquet")
    return folder


def mlflow_trial_runs(root: Path, metric: str | None = None) -> dict[str, tuple[dict[str, str], list[int], str]]:
    """Trial id -> (its MLflow params, the steps of ``metric`` (none without one), its
    ``tuner.status``), from the nested runs under this sweep folder's parent run."""
    from mlflow.tracking import MlflowClient

    state = json.loads((root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], f"tags.mlflow.parentRunId = '{state['parent_run_id']}'")
    return {
        run.data.tags["tuner.trial_id"]: (
            run.data.params,
            [m.step for m in client.get_metric_history(run.info.run_id, metric)] if metric else [],
            run.data.tags.get("tuner.status", ""),
        )
        for run in runs
    }


def tensorboard_hparams(root: Path) -> list[tuple[set[str], set[str]]]:
    """Per trial folder with HParams (in order): its hyperparameters and its metrics' tags, as
    TensorBoard reads them (a trial that failed before its first report has none)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    found = []
    for folder in sorted((root / "tune").glob("trial_driver_*")):
        events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
        events.Reload()
        try:
            content = events.PluginTagToContent("hparams")
        except KeyError:
            continue
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
        found.append((set(start.session_start_info.hparams), {m.name.tag for m in experiment.experiment.metric_infos}))
    return found


def tensorboard_steps(root: Path, tag: str) -> list[list[int]]:
    """Per trial folder (in order): the steps of scalar ``tag`` (``ray/tune/<metric>``) as
    TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = []
    for folder in sorted((root / "tune").glob("trial_driver_*")):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        steps.append([e.step for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else [])
    return steps
