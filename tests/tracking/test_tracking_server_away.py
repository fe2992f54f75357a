"""A tracking server that goes away: a real ``mlflow server`` on 127.0.0.1, stopped for
longer than the client's retries while a sweep runs (``python -m tuner`` in a subprocess,
a local Ray of its own), then started again on the same store. The sweep goes on, says once
that MLflow is unreachable and once that it is back, and nothing is lost; a server still
away at the end leaves the records to ``resume``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from integration_helpers import data_root, free_port, start_sweep, tuner_cli, users_sweep

from tuner.folder.records import MLFLOW_BEHIND, trial_histories
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SLOW = textwrap.dedent(
    """
    import time


    def train(params, context):
        for epoch in range(context.start_epoch, context.max_epochs):
            time.sleep(1.0)
            context.report({"score": params["x"] * (epoch + 1)})
    """
)
EPOCHS = 40


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a sqlite store of the test's own."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        mlflow = Path(sys.executable).with_name("mlflow")
        self.process = subprocess.Popen(
            [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
            + ["--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}"]
            + ["--default-artifact-root", str(self.folder / "artifacts")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError("mlflow server did not answer /health in 90 s")

    def stop(self) -> None:
        import os
        import signal

        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # gone at once, as a crashed server is
            self.process.wait()

    def epochs(self) -> dict[str, list[int]]:
        """Each trial run's steps of the metric, as the server holds them."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`tuner.kind` = 'trial'")
        return {
            run.data.tags["tuner.trial_id"]: sorted(m.step for m in client.get_metric_history(run.info.run_id, "score"))
            for run in runs
        }


@pytest.fixture
def server(tmp_path):
    running = MlflowServer(tmp_path / "mlflow-server")
    running.folder.mkdir()
    running.start()
    yield running
    running.stop()


def _sweep(tmp_path: Path, uri: str) -> Path:
    return users_sweep(
        tmp_path,
        {"slow.py": SLOW},
        {
            "name": "away",
            "trainable": "slow:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": EPOCHS},
            "space": {"params": {"x": {"grid": [0.5, 0.9]}}},
            "scheduler": {"name": "fifo"},
            "trials": {"num_samples": 1},
            "tracking": {"mlflow": {"tracking_uri": uri}},
        },
    )


def _run(tmp_path: Path, server: MlflowServer, ray_tmp: Path, back_after_s: float | None) -> tuple[str, int]:
    """The sweep, the server stopped once 2 epochs are in and, unless None, started again
    ``back_after_s`` later; its console and exit code."""
    env = {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}
    process = start_sweep(_sweep(tmp_path, server.uri), env=env)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    root = tmp_path / "runs" / "away"
    deadline = time.monotonic() + 180
    while sum(len(p.read_text().splitlines()) for p in root.glob("history/*.jsonl")) < 2:
        assert process.poll() is None and time.monotonic() < deadline, "".join(output)[-3000:]
        time.sleep(0.2)
    server.stop()
    if back_after_s is not None:
        time.sleep(back_after_s)
        server.start()
    process.wait(timeout=300)
    reader.join(timeout=10)
    return "".join(output) + process.stderr.read(), process.returncode


def test_a_server_away_for_longer_than_the_retries_loses_nothing_and_is_said_once_each_way(tmp_path, server, ray_tmp):
    console, code = _run(tmp_path, server, ray_tmp, back_after_s=15)
    assert code == 0, console[-3000:]
    assert console.count(f"MLflow at {server.uri} is unreachable") == 1, console[-3000:]
    assert console.count(f"MLflow at {server.uri} is back after") == 1, console[-3000:]
    assert "View run" not in console and "View experiment" not in console  # MLflow's own lines
    root = tmp_path / "runs" / "away"
    histories = trial_histories(SweepFolder(root))
    assert server.epochs() == {trial: list(range(1, EPOCHS + 1)) for trial in histories}
    assert not (root / MLFLOW_BEHIND).exists()


def test_a_server_still_away_at_the_end_leaves_the_records_to_resume(tmp_path, server, ray_tmp):
    console, code = _run(tmp_path, server, ray_tmp, back_after_s=None)
    root = tmp_path / "runs" / "away"
    assert code == 0, console[-3000:]
    assert (root / "best" / "metrics.json").is_file()  # the sweep's outcome does not wait for MLflow
    assert f"MLflow at {server.uri} is still unreachable" in console, console[-3000:]
    assert f"resume {root}" in console
    assert (root / MLFLOW_BEHIND).exists()

    server.start()
    resumed = tuner_cli("resume", str(root), env={"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    histories = trial_histories(SweepFolder(root))
    assert server.epochs() == {trial: list(range(1, EPOCHS + 1)) for trial in histories}
    assert not (root / MLFLOW_BEHIND).exists()
    again = tuner_cli("resume", str(root), env={"RAY_TMPDIR": str(ray_tmp)})  # now finished: nothing to do
    assert again.returncode == 0 and "nothing to resume" in again.stdout + again.stderr
