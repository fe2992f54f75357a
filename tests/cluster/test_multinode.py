"""A sweep on a Ray cluster of several nodes on this machine (each its own raylet and
CPUs), and a node lost mid-sweep. The trials' nodes come from tuner's own records: every
epoch in ``history/`` names the Ray node of each rank."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import (
    assert_no_leaks_on,
    kill_ray_under,
    mlflow_children,
    s3_server,
    small_sweep,
    start_sweep,
    tuner_cli,
    venv_env,
)

from tuner.folder import remote
from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def s3():
    """Object storage every node reaches: started before the nodes, which inherit its
    credentials from this process's environment (as nodes get them from an instance role)."""
    with s3_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def cluster(s3):
    """A head with no CPUs (so trials land on nodes that can be lost) and two 1-CPU nodes.
    Dead nodes are noticed within seconds, as in Ray's own node-loss tests."""
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
        ensure_token_if_auth_enabled,
    )
    from ray.cluster_utils import Cluster

    # Token mode in this process and every node and driver, as `ray start` clusters run
    # by default (a cluster_utils node started without it disagrees with a driver that
    # holds a token). Ray's helper also refreshes this process's cached mode.
    saved_mode = os.environ.get("RAY_AUTH_MODE")
    enable_token_auth_by_default()
    ensure_token_if_auth_enabled({}, create_token_if_missing=True)
    temp_dir = Path(tempfile.mkdtemp(prefix="trm", dir="/tmp"))  # short: socket paths
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "temp_dir": str(temp_dir),
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5},
        },
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()
        kill_ray_under(temp_dir)
        if saved_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved_mode


def _workers(cluster) -> dict[str, object]:
    return {node.node_id: node for node in cluster.worker_nodes}


def _ensure_two_workers(cluster) -> None:
    while len(cluster.worker_nodes) < 2:
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()


def _run(tmp_path: Path, cluster, name: str, **sections):
    sweep = small_sweep(tmp_path, name=name, **sections)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _nodes_per_epoch(root: Path) -> dict[str, list[list[str]]]:
    histories = trial_histories(SweepFolder(root))
    return {trial: [row["nodes"].split(",") for row in rows] for trial, rows in histories.items()}


def test_trials_run_on_both_nodes_and_a_ddp_trial_spans_them(cluster, tmp_path):
    _ensure_two_workers(cluster)
    workers = set(_workers(cluster))
    one_each = _run(tmp_path, cluster, "spread", train={"epochs": 1}, trials={"num_samples": 2})
    done = tuner_cli("sweep", str(one_each), "--address", cluster.address, env=venv_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    nodes = _nodes_per_epoch(tmp_path / "runs" / "spread")
    used = {node for epochs in nodes.values() for ranks in epochs for node in ranks}
    print(f"trials per node: { {n[:8]: sum(n in e[0] for e in nodes.values()) for n in used} }")
    assert used == workers, f"trials ran on {used}, the cluster's nodes are {workers}"
    assert json.loads((tmp_path / "runs" / "spread" / "best" / "metrics.json").read_text())["test_accuracy"] > 0.3

    # One trial of two 1-CPU workers fits no single node: its bundles, and so its ranks, span both.
    ddp = _run(
        tmp_path,
        cluster,
        "spanning",
        train={"epochs": 1},
        trials={"num_samples": 1},
        scaling={"workers": 2, "cpus_per_worker": 1},
    )
    done = tuner_cli("sweep", str(ddp), "--address", cluster.address, env=venv_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [epochs] = _nodes_per_epoch(tmp_path / "runs" / "spanning").values()
    assert sorted(epochs[0]) == sorted(workers), f"the 2-worker trial's ranks ran on {epochs[0]}"
    assert json.loads((tmp_path / "runs" / "spanning" / "best" / "metrics.json").read_text())["test_accuracy"] > 0.3

    assert_no_leaks_on(cluster.address)


def test_a_ddp_trial_spanning_nodes_keeps_everything_at_an_s3_uri(cluster, s3, tmp_path):
    """output_dir: s3://...: the nodes see it (tuner checks from each), Train's and Tune's
    checkpoints go there from the node that holds them, and tuner's records follow."""
    _ensure_two_workers(cluster)
    workers = set(_workers(cluster))
    spec = small_sweep(
        tmp_path,
        name="s3ddp",
        train={"epochs": 1},
        trials={"num_samples": 1},
        scaling={"workers": 2, "cpus_per_worker": 1},
        tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}},
    )
    spec["output_dir"] = s3("cluster")
    path = tmp_path / "s3ddp.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = tuner_cli("sweep", str(path), "--address", cluster.address, env=venv_env(TUNER_CACHE_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = s3("cluster/s3ddp")
    files = remote.list_files(folder)
    assert any(f.startswith("train/") for f in files), files  # Ray Train's run of the trial
    assert any(f.startswith("tune/") and "/checkpoint_" in f for f in files), files
    assert {"sweep.yaml", "timeline.jsonl", "mlflow.json", "best/metrics.json", "best/model.pt"} <= set(files)
    assert not any(".tuner-visible-" in f for f in files) and "lock" not in files
    [history] = [f for f in files if f.startswith("history/")]
    [row] = [json.loads(line) for line in remote.read_bytes(remote.join(folder, history)).decode().splitlines()]
    assert sorted(row["nodes"].split(",")) == sorted(workers), f"the 2-worker trial's ranks ran on {row['nodes']}"
    assert_no_leaks_on(cluster.address)


def _kill_the_node_of_a_running_trial(cluster, root: Path, process) -> tuple[str, str, int]:
    """Once a trial has 2 epochs, SIGKILL its node's processes (raylet and all) mid-epoch;
    returns (trial id, lost node id, epochs it had reported)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        histories = trial_histories(SweepFolder(root)) if (root / "history").is_dir() else {}
        ready = [(trial, rows) for trial, rows in histories.items() if len(rows) >= 2]
        if ready:
            trial, rows = ready[0]
            node_id = rows[-1]["nodes"]
            cluster.remove_node(_workers(cluster)[node_id], allow_graceful=False)
            return trial, node_id, len(trial_histories(SweepFolder(root))[trial])
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("no trial reached 2 epochs in time")


def test_a_lost_node_restarts_its_trial_from_its_checkpoint_on_a_surviving_node(cluster, tmp_path):
    _ensure_two_workers(cluster)
    epochs = 6
    sweep_file = _run(
        tmp_path,
        cluster,
        "lossy",
        data={"train_subset": 6000},
        train={"epochs": epochs},
        trials={"num_samples": 2, "max_failures": 1},
    )
    process = start_sweep(sweep_file, env={**venv_env(), "RAY_ADDRESS": cluster.address})
    root = tmp_path / "runs" / "lossy"
    trial, lost, reported = _kill_the_node_of_a_running_trial(cluster, root, process)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, out[-3000:] + err[-3000:]

    rows = trial_histories(SweepFolder(root))[trial]
    assert [row["epoch"] for row in rows] == list(range(1, epochs + 1)), "epochs repeated or lost"
    restarted = rows[reported:]
    assert restarted and all(row["nodes"] != lost for row in restarted), "the lost trial ran again on the lost node"
    assert restarted[0]["resumed_from"] == trial, "the restart did not load the trial's own checkpoint"
    print(f"lost node after epoch {reported}; restart epoch {restarted[0]['epoch']} on {restarted[0]['nodes'][:8]}")
    steps = mlflow_children(root)  # one MLflow run per trial (it asserts no duplicate)
    assert sorted(steps) == sorted(trial_histories(SweepFolder(root))) and steps[trial] == list(range(1, epochs + 1))
    assert_no_leaks_on(cluster.address)


def test_without_retries_a_lost_node_errors_its_trial_and_resume_retries_it(cluster, tmp_path):
    _ensure_two_workers(cluster)
    epochs = 5
    sweep_file = _run(
        tmp_path,
        cluster,
        "noretry",
        data={"train_subset": 6000},
        train={"epochs": epochs},
        trials={"num_samples": 2, "max_failures": 0},
    )
    process = start_sweep(sweep_file, env={**venv_env(), "RAY_ADDRESS": cluster.address})
    root = tmp_path / "runs" / "noretry"
    trial, _, reported = _kill_the_node_of_a_running_trial(cluster, root, process)
    out, err = process.communicate(timeout=600)
    status = tuner_cli("status", str(root))
    line = next(line for line in status.stdout.splitlines() if line.startswith(trial))
    assert "errored" in line, status.stdout + f"\nrc={process.returncode}\n" + out[-4000:] + err[-4000:]
    other = [t for t in trial_histories(SweepFolder(root)) if t != trial]
    assert len(trial_histories(SweepFolder(root))[other[0]]) == epochs, "the other trial did not finish"
    reason = next(line for line in status.stdout.splitlines() if line.startswith(f"  {trial} errored: "))
    assert "actor" in reason.lower(), reason  # Ray's words for the lost trial process, not just "errored"

    _ensure_two_workers(cluster)
    resumed = tuner_cli("resume", str(root), "--address", cluster.address, env=venv_env())
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    rows = trial_histories(SweepFolder(root))[trial]
    assert [row["epoch"] for row in rows] == list(range(1, epochs + 1))
    assert rows[reported]["resumed_from"] == trial
    assert_no_leaks_on(cluster.address)
