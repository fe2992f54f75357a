"""A sweep whose output_dir is a storage URI: a real S3 API (moto's server on 127.0.0.1),
Ray Tune writing its state and checkpoints there, tuner's records mirrored there, and
status / best / export / resume reading them back from it."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import s3_server, small_sweep, start_sweep, tuner_cli

from tuner.folder import remote
from tuner.invocation import tuner_command

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_ray")]
BUCKET = "tuner-test"  # s3_server's


@pytest.fixture(scope="module")
def s3():
    """``uri(folder)``: an s3:// URI in a bucket of a real S3 server of this module's own."""
    with s3_server() as uri:
        yield uri


def _write_sweep(tmp_path: Path, output_dir: str, **sections) -> Path:
    sweep = small_sweep(tmp_path, **sections)
    sweep["output_dir"] = output_dir
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _history(uri: str) -> dict[str, list[int]]:
    rows = {}
    for name in remote.list_files(remote.join(uri, "history")):
        lines = remote.read_bytes(remote.join(uri, "history", name)).decode().splitlines()
        rows[name.removesuffix(".jsonl")] = [json.loads(line)["training_iteration"] for line in lines]
    return rows


def test_uri_helpers_keep_the_query_at_the_end():
    uri = "s3://b/runs?endpoint_override=h:9000&scheme=http"
    assert remote.join(uri, "it", "best") == "s3://b/runs/it/best?endpoint_override=h:9000&scheme=http"
    assert remote.parent(remote.join(uri, "it")) == uri
    assert remote.name(remote.join(uri, "it-2")) == "it-2"
    assert remote.join("gs://b/runs/", "it") == "gs://b/runs/it"


def test_a_sweep_at_an_s3_uri_is_interrupted_resumed_read_and_exported_from_there(tmp_path, s3, ray_tmp):
    runs, folder = s3("runs"), s3("runs/it")
    cache = tmp_path / "cache"
    env = {"RAY_TMPDIR": str(ray_tmp), "TUNER_CACHE_DIR": str(cache)}
    sweep_file = _write_sweep(
        tmp_path,
        runs,
        data={"train_subset": 1500},
        train={"epochs": 3},
        space={"params": {"lr": {"grid": [3e-3, 1e-3]}}},
        trials={"num_samples": 1},
        tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}},
    )

    # Interrupted after its first epoch: Tune's state is at the URI, the records too.
    process = start_sweep(sweep_file, env=env)
    deadline = time.monotonic() + 600
    while not any(p.read_text().strip() for p in cache.glob("working/*/it/history/*.jsonl")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no epoch in time"
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    assert f"  output: {folder}" in stdout
    assert f"{tuner_command()} resume {folder}" in stderr
    files = remote.list_files(folder)
    assert "sweep.yaml" in files and "mlflow.json" in files and "timeline.jsonl" in files
    assert any(f.startswith("tune/experiment_state") for f in files)
    assert any("/checkpoint_" in f for f in files if f.startswith("tune/")), files
    assert "lock" not in files and not any(f.startswith("best/") for f in files)
    assert sum(len(epochs) for epochs in _history(folder).values()) >= 1
    assert not (Path.cwd() / "s3:").exists()  # no local folder named after the scheme

    status = tuner_cli("status", folder, timeout=300, env=env)
    assert status.returncode == 0, status.stderr
    assert "of 2 trial(s) started" in status.stdout, status.stdout

    resumed = tuner_cli("resume", folder, timeout=900, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"exported to {remote.join(folder, 'best')}" in resumed.stdout
    histories = _history(folder)
    assert len(histories) == 2
    for epochs in histories.values():
        assert epochs[-1] == 3 and sorted(set(epochs)) == [1, 2, 3], histories  # continued, not restarted
    metrics = json.loads(remote.read_bytes(remote.join(folder, "best", "metrics.json")))
    assert metrics["checkpoint"].startswith(f"s3://{BUCKET}/runs/it/tune/")
    assert {"config.yaml", "model.pt"} <= {f.removeprefix("best/") for f in remote.list_files(folder)}
    assert "lock" not in remote.list_files(folder)

    # MLflow: one parent run for the folder, one nested run per trial, across the resume.
    from mlflow.tracking import MlflowClient

    state = json.loads(remote.read_bytes(remote.join(folder, "mlflow.json")))
    client = MlflowClient(state["tracking_uri"])
    assert client.get_run(state["parent_run_id"]).data.tags["tuner.output"] == folder
    trials = client.search_runs([state["experiment_id"]], f"tags.mlflow.parentRunId = '{state['parent_run_id']}'")
    assert sorted(r.data.tags["tuner.trial_id"] for r in trials) == sorted(histories)

    best = tuner_cli("best", folder, timeout=300, env=env)
    assert best.returncode == 0, best.stderr
    assert f"best trial {metrics['trial_id']}" in best.stdout
    assert f"(exported in {remote.join(folder, 'best')})" in best.stdout

    refused = tuner_cli("export", folder, timeout=300, env=env)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--to DIR" in refused.stderr
    exported = tuner_cli("export", folder, "--to", str(tmp_path / "exported"), timeout=300, env=env)
    assert exported.returncode == 0, exported.stderr
    again = json.loads((tmp_path / "exported" / "metrics.json").read_text())
    assert (again["trial_id"], again["test_accuracy"]) == (metrics["trial_id"], metrics["test_accuracy"])

    # The same file again: a new folder beside the first, which is kept as it is.
    second = tuner_cli("sweep", str(sweep_file), "--smoke", timeout=900, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"  output: {s3('runs/it-2')}" in second.stdout
    assert f"{folder} holds an earlier, finished run of this sweep" in second.stdout
    assert _history(folder) == histories
    assert "best/metrics.json" in remote.list_files(s3("runs/it-2"))
    assert [p for p in (cache / "working").iterdir()] == []  # every working copy was removed


def test_a_uri_folder_in_use_is_refused_and_a_stale_lock_is_taken_over(tmp_path, s3):
    folder = s3("locks/it")
    sweep = small_sweep(tmp_path)
    sweep["output_dir"] = s3("locks")
    remote.write_bytes(remote.join(folder, "sweep.yaml"), yaml.safe_dump(sweep).encode())
    holder = {"pid": 4242, "host": "elsewhere", "command": "python -m tuner sweep x", "since": "2026-11-23 10:00:00"}
    lock = remote.join(folder, "lock")
    env = {"TUNER_CACHE_DIR": str(tmp_path / "cache")}

    remote.write_bytes(lock, json.dumps({**holder, "refreshed": time.time()}).encode())
    busy = tuner_cli("resume", folder, timeout=300, env=env)
    assert busy.returncode == 2, busy.stderr
    assert busy.stderr == f"tuner: error: {folder} is in use by process 4242 on elsewhere " + (
        "(python -m tuner sweep x, since 2026-11-23 10:00:00); wait for it to end, or stop it\n"
    )
    assert sorted(remote.list_files(folder)) == ["lock", "sweep.yaml"]  # nothing touched

    remote.write_bytes(lock, json.dumps({**holder, "refreshed": time.time() - 3600}).encode())
    stale = tuner_cli("resume", folder, timeout=300, env=env)
    assert stale.returncode == 2, stale.stderr
    assert "no Tune experiment state to resume" in stale.stderr  # got past the lock
    assert remote.list_files(folder) == ["sweep.yaml"]  # the stale lock is gone with the run that took it


def test_a_uri_output_dir_without_an_mlflow_store_is_refused_before_anything_is_written(tmp_path, s3):
    sweep_file = _write_sweep(tmp_path, s3("nomlflow"))
    done = tuner_cli("sweep", str(sweep_file), timeout=300, env={"TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "tracking.mlflow.tracking_uri" in done.stderr, done.stderr
    assert remote.list_files(s3("nomlflow")) == []
    assert not (tmp_path / "cache").exists()
