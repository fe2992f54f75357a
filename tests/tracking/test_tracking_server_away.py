"""A tracking server that goes away: a real ``mlflow server`` on 127.0.0.1, stopped for
longer than the client's retries while a sweep runs (``python -m tuner`` in a subprocess,
a local Ray of its own), then started again on the same store. The sweep goes on, says once
that MLflow is unreachable and once that it is back, and nothing is lost; a server still
away at the end leaves the records to ``resume``. The pure rules (what counts as away, the
writer's queue): tests/tracking/test_server_away_rules.py."""

from __future__ import annotations

import os
import re
import signal
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600), pytest.mark.usefixtures("warm_ray")]

# Half a second an epoch; after epoch 3 each trial waits for the test's word (the file
# RELEASE), so the sweep outlives the server's absence however slowly a loaded machine
# starts it again, and no more.
SLOW = textwrap.dedent(
    """
    import os
    import time


    def train(params, context):
        for epoch in range(context.start_epoch, context.max_epochs):
            time.sleep(0.5)
            context.report({"score": params["x"] * (epoch + 1)})
            while epoch + 1 >= 3 and not os.path.exists(RELEASE):
                time.sleep(0.2)
    """
)
EPOCHS = 6
AWAY_S = 5  # and its start again (7-9 s here): longer than a call's retries when the port refuses (4 s)


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a sqlite store of its own; stopped by its process id."""

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
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # gone at once, as a crashed server is
            self.process.wait()

    def epochs(self, sweep_root: Path) -> dict[str, list[int]]:
        """Each trial run's steps of the metric, as the server holds them, for the trials of
        the sweep in ``sweep_root``."""
        from mlflow.tracking import MlflowClient

        ours = set(trial_histories(SweepFolder(sweep_root)))
        client = MlflowClient(self.uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`tuner.kind` = 'trial'")
        return {
            run.data.tags["tuner.trial_id"]: sorted(m.step for m in client.get_metric_history(run.info.run_id, "score"))
            for run in runs
            if run.data.tags["tuner.trial_id"] in ours
        }


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for the module (its start takes 5-15 s here); each test's sweep has a name,
    and so an experiment, of its own."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    running = MlflowServer(folder)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def server(mlflow_server):
    if mlflow_server.process is None or mlflow_server.process.poll() is not None:
        mlflow_server.start()  # a test before stopped it
    return mlflow_server


class Sweep:
    """``tuner sweep`` in a subprocess, its stdout read as it comes."""

    def __init__(self, tmp_path: Path, name: str, uri: str, ray_tmp: Path):
        self.release = tmp_path / "release"
        self.root = tmp_path / "runs" / name
        self.env = {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}
        sweep = {
            "name": name,
            "trainable": "slow:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": EPOCHS},
            "space": {"params": {"x": {"grid": [0.5, 0.9]}}},
            "scheduler": {"name": "fifo"},
            "trials": {"num_samples": 1, "stall_timeout_s": None},  # a held trial is the test's doing
            "tracking": {"mlflow": {"tracking_uri": uri}},
        }
        code = SLOW.replace("RELEASE", repr(str(self.release)))
        self.process = start_sweep(users_sweep(tmp_path, {"slow.py": code}, sweep), env=self.env)
        self.output: list[str] = []
        self.reader = threading.Thread(target=lambda: self.output.extend(self.process.stdout), daemon=True)
        self.reader.start()

    def console(self) -> str:
        return "".join(self.output)

    def wait_for(self, what: str, condition, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.process.poll() is not None:
                said = self.console()[-3000:] + self.process.stderr.read()[-3000:]
                raise AssertionError(f"the sweep ended ({self.process.returncode}) before {what}:\n{said}")
            assert time.monotonic() < deadline, f"no {what} in {timeout_s:g} s:\n{self.console()[-3000:]}"
            time.sleep(0.2)

    def epochs_in(self) -> int:
        return sum(len(p.read_text().splitlines()) for p in self.root.glob("history/*.jsonl"))

    def let_go(self) -> tuple[str, int]:
        """Let the trials finish; the whole console and the exit code."""
        self.release.touch()
        self.process.wait(timeout=300)
        self.reader.join(timeout=10)
        return self.console() + self.process.stderr.read(), self.process.returncode

    def every_epoch(self) -> dict[str, list[int]]:
        return {trial: list(range(1, EPOCHS + 1)) for trial in trial_histories(SweepFolder(self.root))}

    def end(self) -> None:
        """After a failed test: let its trials go and give it 60 s, then kill its group."""
        self.release.touch()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def sweep_of(tmp_path, ray_tmp):
    """``sweep_of(name, uri)``: a Sweep started now, ended after the test (before its Ray's
    temp folder is cleaned: this fixture depends on ray_tmp)."""
    started: list[Sweep] = []

    def start(name: str, uri: str) -> Sweep:
        started.append(Sweep(tmp_path, name, uri, ray_tmp))
        return started[-1]

    yield start
    for sweep in started:
        sweep.end()


def test_a_server_away_for_longer_than_the_retries_loses_nothing_and_is_said_once_each_way(server, sweep_of):
    sweep = sweep_of("away", server.uri)
    sweep.wait_for("a first epoch of each trial", lambda: sweep.epochs_in() >= 2)
    server.stop()
    sweep.wait_for("the line that MLflow is unreachable", lambda: "is unreachable" in sweep.console(), 60)
    time.sleep(AWAY_S)
    server.start()
    sweep.wait_for("the line that MLflow is back", lambda: "is back after" in sweep.console(), 60)
    console, code = sweep.let_go()  # the last epochs with the server there again

    assert code == 0, console[-3000:]
    assert console.count(f"MLflow at {server.uri} is unreachable") == 1, console[-3000:]
    assert console.count(f"MLflow at {server.uri} is back after") == 1, console[-3000:]
    # among tuner's own lines, through its reporter: stamped like them
    assert re.search(r"^\[ *\d+s\] MLflow at \S+ is unreachable", console, re.MULTILINE), console[-3000:]
    assert "View run" not in console and "View experiment" not in console  # MLflow's own lines
    assert server.epochs(sweep.root) == sweep.every_epoch()
    assert not (sweep.root / MLFLOW_BEHIND).exists()


def test_a_server_still_away_at_the_end_leaves_the_records_to_resume(server, sweep_of):
    sweep = sweep_of("away-to-the-end", server.uri)
    sweep.wait_for("a first epoch of each trial", lambda: sweep.epochs_in() >= 2)
    server.stop()
    console, code = sweep.let_go()  # away from epoch 1 or 2 to the end

    assert code == 0, console[-3000:]
    assert (sweep.root / "best" / "metrics.json").is_file()  # the sweep's outcome does not wait for MLflow
    assert console.count(f"MLflow at {server.uri} is unreachable") == 1, console[-3000:]
    assert "is back after" not in console
    assert console.count(f"resume {sweep.root} writes every record") == 1, console[-3000:]  # once, after the export
    assert (sweep.root / MLFLOW_BEHIND).exists()
    assert "lacks some of this sweep's records" in console and "every trial recorded" not in console

    server.start()
    resumed = tuner_cli("resume", str(sweep.root), env=sweep.env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert server.epochs(sweep.root) == sweep.every_epoch()
    assert not (sweep.root / MLFLOW_BEHIND).exists()
    again = tuner_cli("resume", str(sweep.root), env=sweep.env)  # now finished: nothing to do, no Ray
    assert again.returncode == 0 and "nothing to resume" in again.stdout + again.stderr
