"""``tuner ui`` serves TensorBoard and MLflow on 127.0.0.1, and Ctrl-C stops both."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request

import pytest
from integration_helpers import recorded_sweep, running_ui

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_ui_serves_both_and_stops_on_ctrl_c(tmp_path):
    output, record = recorded_sweep(tmp_path)
    with running_ui(output) as (process, mlflow_url, tb_url):
        found = _post(f"{mlflow_url}/api/2.0/mlflow/runs/search", {"experiment_ids": [record.experiment_id]})
        names = sorted(run["info"]["run_name"] for run in found["runs"])
        assert names == ["abcde_00000", "abcde_00001", "ui_check"]
        with urllib.request.urlopen(f"{tb_url}/data/environment", timeout=30) as response:
            assert json.loads(response.read())["data_location"] == str(output.resolve())

        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert f"MLflow: {mlflow_url}/" in stdout and f"TensorBoard: {tb_url}/" in stdout
    for url in (mlflow_url, tb_url):  # both servers are gone: their ports are free again
        port = int(url.rsplit(":", 1)[1])
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_ui_on_a_folder_without_a_store_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "tuner", "ui", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no mlflow.db here" in done.stderr
