"""Sweeps on a Ray cluster made as users make one: ``ray start --head`` and ``ray start
--address`` as separate processes on this machine (token auth on, the dashboard on
127.0.0.1, both nodes in one temp dir as ``ray start`` does by default). Sweeps submitted
as Ray Jobs (and one joined by address): run to SUCCEEDED on both nodes, refused bad files,
stopped and resumed, a worker node lost under a running trial, the head lost and the sweep
resumed on a new cluster; a served model left running on the cluster and stopped by
address. One cluster serves the module; the head-loss test, last, replaces it. The trials'
nodes come from tuner's own records: every epoch in ``history/`` names the Ray node of
each rank.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from integration_helpers import (
    assert_no_leaks_on,
    busy_cpus,
    data_root,
    export_config,
    free_port,
    http_get,
    http_post,
    mlflow_children,
    png_bytes,
    ray_start_cluster,
    small_sweep,
    train_tiny_cnn,
    tuner_cli,
)

from tuner.data.datasets import load_test_split
from tuner.folder.records import read_timeline, trial_histories
from tuner.folder.store import SweepFolder
from tuner.results.export import load_best, write_package

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster():
    temp_dir = Path(tempfile.mkdtemp(prefix="trj", dir="/tmp"))  # short: socket paths
    with ray_start_cluster(temp_dir, head_cpus=1, workers=1) as started:
        yield started


def _file(tmp_path: Path, name: str, **sections) -> Path:
    sweep = small_sweep(tmp_path, name=name, **sections)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _cli(cluster, *args: str, timeout: float = 900):
    return tuner_cli(*args, timeout=timeout, env=cluster.env)


def _job_id(stdout: str) -> str:
    first = stdout.splitlines()[0]
    assert first.startswith("submitted job "), stdout
    return first.split()[2]


def _job_info(cluster, job_id: str):
    """What Ray's own JobSubmissionClient says of the job (in a process in token mode)."""
    probe = (
        "import json\nfrom ray.job_submission import JobSubmissionClient\n"
        f"info = JobSubmissionClient({cluster.dashboard!r}).get_job_info({job_id!r})\n"
        "print(json.dumps({'status': str(info.status), 'exit': info.driver_exit_code}))\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=cluster.env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _serve_replicas(cluster) -> dict[str, int]:
    """The tuner service's live replicas, by Ray node: their process ids (Ray's state API)."""
    probe = (
        "import json, ray\nfrom ray.util.state import list_actors\nray.init(log_to_driver=False)\n"
        "alive = list_actors(filters=[('state', '=', 'ALIVE')], raise_on_missing_output=False)\n"
        "print(json.dumps({a.node_id: a.pid for a in alive if a.class_name == 'ServeReplica:tuner:model'}))\n"
    )
    import subprocess
    import sys

    env = {**cluster.env, "RAY_ADDRESS": cluster.address}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _nodes_per_epoch(root: Path) -> dict[str, list[str]]:
    return {trial: [row["nodes"] for row in rows] for trial, rows in trial_histories(SweepFolder(root)).items()}


def _epochs(root: Path, wanted: Callable[[int], bool]) -> dict[str, int] | None:
    """Each trial's epochs in the sweep's history, once some trial's count is ``wanted``."""
    histories = trial_histories(SweepFolder(root)) if (root / "history").is_dir() else {}
    counts = {trial: len(rows) for trial, rows in histories.items()}
    return counts if any(wanted(count) for count in counts.values()) else None


def _tune_saved_epochs(root: Path, wanted: Callable[[int], bool]) -> dict[str, int] | None:
    """Each trial's epochs in Tune's newest saved experiment state, once some trial's count is ``wanted``."""
    states = sorted((root / "tune").glob("experiment_state-*.json"))
    try:
        trial_data = json.loads(states[-1].read_text())["trial_data"] if states else []
    except ValueError:  # being rewritten
        return None
    saved = {}
    for trial_json, runtime_json in trial_data:
        last = json.loads(runtime_json)["last_result"]
        saved[json.loads(trial_json)["trial_id"]] = int(last.get("training_iteration") or 0)
    return saved if any(wanted(count) for count in saved.values()) else None


def _worker(cluster):
    [worker] = [node for node in cluster.nodes if not node.head]
    return worker


def _ensure_worker(cluster) -> None:
    if not any(not node.head for node in cluster.nodes):
        cluster.add_worker()


def test_ray_still_deletes_a_jobs_working_dir_under_it_on_a_shared_host(cluster, tmp_path):
    """The Ray bug tuner works around (tuner/usercode/shipped.py): on a host with two nodes in one temp
    dir, the second node's runtime-env agent deletes and unpacks again a job's working_dir
    when the driver's ray.init() starts the job, under the driver whose cwd it is. When this
    test fails, Ray has fixed it and tuner's jobs could ship a working_dir again."""
    folder = tmp_path / "wd"
    folder.mkdir()
    (folder / "unique.txt").write_text(os.urandom(8).hex())  # a package no node has unpacked yet
    check = (
        "import os, time, ray; cwd = os.getcwd(); ray.init(); time.sleep(3); "
        "print('cwd after ray.init():', 'kept' if os.path.exists(cwd) and os.path.samefile(cwd, '.') else 'replaced')"
    )
    probe = (
        "import sys, time\nfrom ray.job_submission import JobSubmissionClient\n"
        f"jobs = JobSubmissionClient({cluster.dashboard!r})\n"
        f"job = jobs.submit_job(entrypoint=sys.argv[1], runtime_env={{'working_dir': {str(folder)!r}}})\n"
        "while not jobs.get_job_status(job).is_terminal(): time.sleep(0.5)\n"
        "print(jobs.get_job_logs(job))\n"
    )
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", probe, f'python -c "{check}"'],
        capture_output=True,
        text=True,
        timeout=300,
        env=cluster.env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cwd after ray.init(): replaced" in done.stdout, (
        "Ray no longer replaces a job's working_dir under its driver on a shared host: tuner's jobs could ship "
        f"a working_dir again (tuner/usercode/shipped.py, docs/ray-notes.md). Job output: {done.stdout[-2000:]}"
    )


def test_a_bad_file_is_refused_here_and_nothing_is_submitted(cluster, tmp_path):
    bad = _file(tmp_path, "bad", train={"epochs": 0})
    refused = _cli(cluster, "submit", str(bad), "--address", cluster.dashboard)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "bad.yaml" in line and "train.epochs" in line, line

    relative = _file(tmp_path, "relative", output_dir="runs")
    refused = _cli(cluster, "submit", str(relative), "--address", cluster.dashboard)
    assert refused.returncode == 2
    assert "output_dir" in refused.stderr and "'runs'" in refused.stderr, refused.stderr

    listed = _cli(cluster, "jobs", "--address", cluster.dashboard)
    assert listed.returncode == 0, listed.stderr
    assert "bad" not in listed.stdout and "relative" not in listed.stdout, listed.stdout


def test_a_submitted_sweep_runs_to_succeeded_with_every_trial_in_mlflow(cluster, tmp_path):
    epochs = 2
    sweep_file = _file(tmp_path, "viajob", train={"epochs": epochs}, trials={"num_samples": 2})
    done = _cli(cluster, "submit", str(sweep_file), "--address", cluster.dashboard, "--follow")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job_id = _job_id(done.stdout)
    assert f"job {job_id}: SUCCEEDED (exit code 0)" in done.stdout
    assert _job_info(cluster, job_id) == {"status": "SUCCEEDED", "exit": 0}, "Ray's own client disagrees"

    root = tmp_path / "runs" / "viajob"
    assert json.loads((root / "best" / "metrics.json").read_text())["test_accuracy"] > 0.5
    [run] = [event for event in read_timeline(SweepFolder(root)) if event["event"] == "run"]
    assert run["job"] == job_id and run["cluster"].endswith(f":{cluster.port}"), run
    nodes = _nodes_per_epoch(root)
    # Short trials may all run in one reused trial process (docs/ray-notes.md): which nodes
    # they used is the node-loss test's concern, which waits for a trial on the worker.
    assert {node for trial in nodes.values() for node in trial} <= {node.node_id for node in cluster.nodes}, (
        f"the trials ran on {nodes}, the cluster's nodes are {[n.node_id for n in cluster.nodes]}"
    )
    assert mlflow_children(root) == {trial: list(range(1, epochs + 1)) for trial in nodes}, "MLflow's curves"

    listed = _cli(cluster, "jobs", "--address", cluster.dashboard)
    row = next(line for line in listed.stdout.splitlines() if job_id in line)
    assert "SUCCEEDED" in row and str(root) in row, listed.stdout


def test_a_job_runs_a_users_training_function_shipped_to_both_nodes(cluster, tmp_path):
    """The user's code is in a folder the cluster never saw; the job carries it to every node."""
    _ensure_worker(cluster)
    code = tmp_path / "their_project"
    code.mkdir()
    (code / "job_train.py").write_text(
        "import time\n\n\ndef train(params, context):\n"
        "    shipped = 1.0 if '/tuner-code/' in __file__ else 0.0  # the snapshot tuner wrote on the node\n"
        "    for epoch in range(context.start_epoch, context.max_epochs):\n"
        "        time.sleep(2)\n"
        "        context.report({'score': params['x'] * (epoch + 1), 'shipped': shipped})\n"
    )
    sweep_file = code / "theirs.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "theirs",
                "output_dir": str(tmp_path / "runs"),
                "trainable": "job_train:train",
                "metric": "score",
                "mode": "max",
                "train": {"epochs": 2},
                "space": {"params": {"x": {"grid": [1.0, 2.0]}}},
                "trials": {"num_samples": 1},
            }
        )
    )
    done = _cli(cluster, "submit", str(sweep_file), "--address", cluster.dashboard, "--follow")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--set=code_dir=code" in done.stdout.splitlines()[0]
    root = tmp_path / "runs" / "theirs"
    histories = trial_histories(SweepFolder(root))
    rows = [row for trial in histories.values() for row in trial]
    assert len(rows) == 4 and all(row["shipped"] == 1.0 for row in rows), rows
    # one CPU per node and two trials at once: one trial on each node
    assert {row["nodes"] for row in rows} == {node.node_id for node in cluster.nodes}, rows
    assert json.loads((root / "best" / "metrics.json").read_text())["score"] == 4.0
    assert (root / "code" / "job_train.py").is_file()  # the code the sweep ran, kept with it


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str, tmp_path: Path, file: str = "sweep.yaml") -> Path:
    """``examples/<name>`` copied to a folder the cluster never saw; its sweep file."""
    import shutil

    folder = tmp_path / "theirs" / name
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder / file


def test_a_job_runs_an_optuna_objective_unchanged_with_its_study_on_the_drivers_node(cluster, tmp_path):
    """Optuna's own example as a Ray Job: the study's keeper on the job's driver, the trials
    asking it from either node."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    _ensure_worker(cluster)
    sweep_file = _example("optuna_objective", tmp_path)
    sets = [f"output_dir={tmp_path / 'runs'}", "trials.num_samples=2", "tracking.mlflow.registry=false"]
    done = _cli(
        cluster, "submit", str(sweep_file), *[f"--set={s}" for s in sets], "--address", cluster.dashboard, "--follow"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "optuna_objective"
    journal = JournalStorage(JournalFileBackend(str(root / "study.journal")))
    study = optuna.load_study(study_name="optuna_objective", storage=journal)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]  # 5 startup trials: none pruned
    histories = trial_histories(SweepFolder(root))
    # (short trials may both run in one reused trial process: on one node or the other)
    assert {row["nodes"] for rows in histories.values() for row in rows} <= {node.node_id for node in cluster.nodes}
    assert mlflow_children(root, "value") == {trial: list(range(1, 7)) for trial in histories}  # 5 reports, the value
    assert json.loads((root / "best" / "metrics.json").read_text())["value"] == pytest.approx(study.best_value)


def test_a_job_runs_a_ray_tune_function_unchanged(cluster, tmp_path):
    """Ray Tune's quickstart function as a Ray Job: its tune.report and checkpoints tuner's."""
    _ensure_worker(cluster)
    sweep_file = _example("raytune_function", tmp_path)
    sets = [f"output_dir={tmp_path / 'runs'}", "trials.num_samples=2", "train.epochs=2", "scheduler={name: fifo}"]
    done = _cli(
        cluster, "submit", str(sweep_file), *[f"--set={s}" for s in sets], "--address", cluster.dashboard, "--follow"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "raytune_function"
    histories = trial_histories(SweepFolder(root))
    assert sorted(len(rows) for rows in histories.values()) == [2, 2]
    assert mlflow_children(root, "mean_accuracy") == {trial: [1, 2] for trial in histories}
    state = torch.load(root / "best" / "checkpoint" / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 2  # the function's own checkpoint, exported


@pytest.mark.parametrize(
    "example, file, metric",
    [
        ("lightning_mnist", "sweep.yaml", "val_accuracy"),  # a training function
        ("transformers_trainer", "sweep-command.yaml", "eval_accuracy"),  # a command
    ],
)
def test_a_job_runs_a_trainer_with_its_one_callback_line(cluster, tmp_path, example, file, metric):
    """Lightning's and Transformers' Trainer as Ray Jobs, through TunerCallback."""
    _ensure_worker(cluster)
    sweep_file = _example(example, tmp_path, file)
    name = yaml.safe_load(sweep_file.read_text())["name"]
    sets = [f"output_dir={tmp_path / 'runs'}", "trials.num_samples=1", "train.epochs=2", "scheduler={name: fifo}"]
    done = _cli(
        cluster, "submit", str(sweep_file), *[f"--set={s}" for s in sets], "--address", cluster.dashboard, "--follow"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / name
    [(trial, rows)] = trial_histories(SweepFolder(root)).items()
    assert [row["epoch"] for row in rows] == [1, 2] and rows[-1][metric] > 0.3, rows
    assert mlflow_children(root, metric) == {trial: [1, 2]}
    assert any((root / "best" / "checkpoint").iterdir())  # the Trainer's own checkpoint, exported


def test_a_job_runs_a_torchrun_script_across_both_nodes(cluster, tmp_path):
    """An unchanged DDP script on two workers, one per node (each has one CPU): torchrun's
    variables across nodes, rank 0's lines the reports."""
    _ensure_worker(cluster)
    sweep_file = _example("torchrun_ddp", tmp_path)
    sets = [
        f"output_dir={tmp_path / 'runs'}",
        "trials.num_samples=1",
        "train.epochs=1",
        "scheduler={name: fifo}",
        "space.params.lr=3.0e-3",
        "space.params.hidden=64",
        "space.params.train_size=2000",
        "tracking.mlflow.registry=false",
    ]
    done = _cli(
        cluster, "submit", str(sweep_file), *[f"--set={s}" for s in sets], "--address", cluster.dashboard, "--follow"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "torchrun_ddp"
    [rows] = trial_histories(SweepFolder(root)).values()
    assert [row["world"] for row in rows] == [2] and rows[0]["val_accuracy"] > 0.3, rows
    [ranks] = (root / "tune").glob("*/.ranks")
    nodes = {json.loads(rank.read_text())["node_id"] for rank in ranks.glob("*.json")}
    assert nodes == {node.node_id for node in cluster.nodes}, "the two ranks ran on one node"


def test_a_sweep_joined_by_address_runs_on_the_cluster(cluster, tmp_path):
    sweep_file = _file(tmp_path, "byaddress", train={"epochs": 1}, trials={"num_samples": 2})
    done = _cli(cluster, "sweep", str(sweep_file), "--address", cluster.address)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "byaddress"
    assert json.loads((root / "best" / "metrics.json").read_text())["test_accuracy"] > 0.3
    used = {node for trial in _nodes_per_epoch(root).values() for node in trial}
    assert used <= {node.node_id for node in cluster.nodes}, f"trials ran on {used}, not on the cluster's nodes"
    [run] = [event for event in read_timeline(SweepFolder(root)) if event["event"] == "run"]
    assert run["cluster"].endswith(f":{cluster.port}") and "job" not in run, run  # joined it, not as a job


def test_a_stopped_job_saves_its_sweep_and_resubmitting_the_folder_finishes_it(cluster, tmp_path):
    epochs = 20  # far more than the 2 a trial has when the stop comes
    sweep_file = _file(
        tmp_path, "stopme", data={"train_subset": 1000}, train={"epochs": epochs}, trials={"num_samples": 2}
    )
    submitted = _cli(cluster, "submit", str(sweep_file), "--address", cluster.dashboard)
    assert submitted.returncode == 0, submitted.stderr
    job_id = _job_id(submitted.stdout)
    root = tmp_path / "runs" / "stopme"
    # As soon as one trial is under way (on a loaded machine the other may start much later).
    cluster.wait_for(lambda: _epochs(root, lambda count: 2 <= count < epochs), "a trial to report 2 epochs")

    stopped = _cli(cluster, "stop", job_id, "--address", cluster.dashboard)
    assert stopped.returncode == 0, stopped.stderr
    assert f"job {job_id}: STOPPED" in stopped.stdout
    status = _cli(cluster, "status", str(root))
    assert "interrupted" in status.stdout and not (root / "best").exists(), status.stdout
    before = {trial: len(rows) for trial, rows in trial_histories(SweepFolder(root)).items()}
    cut = [trial for trial, count in before.items() if 0 < count < epochs]
    assert cut, before

    resumed = _cli(cluster, "submit", str(root), "--address", cluster.dashboard, "--follow")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "python -P -m tuner resume" in resumed.stdout.splitlines()[0]
    histories = trial_histories(SweepFolder(root))
    assert len(histories) == 2
    for trial, rows in histories.items():
        assert [row["epoch"] for row in rows] == list(range(1, epochs + 1)), trial  # continued, none repeated
    for trial in cut:  # the stop saved Tune's state: each continued right after its last epoch
        assert histories[trial][before[trial]]["resumed_from"] == trial, (trial, before)
    assert mlflow_children(root) == {trial: list(range(1, epochs + 1)) for trial in histories}
    assert (root / "best" / "metrics.json").is_file()


def test_stop_names_an_unknown_job_in_one_line(cluster):
    refused = _cli(cluster, "stop", "tuner-nope-1", "--address", cluster.dashboard)
    assert refused.returncode == 2
    assert "no job 'tuner-nope-1'" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_a_lost_worker_node_restarts_its_trial_from_its_checkpoint_and_the_job_succeeds(cluster, tmp_path):
    _ensure_worker(cluster)
    epochs = 12  # long enough that the second trial's process is up before the first trial ends
    sweep_file = _file(
        tmp_path,
        "lossy",
        data={"train_subset": 1500},
        train={"epochs": epochs},
        trials={"num_samples": 2, "max_failures": 1},
    )
    submitted = _cli(cluster, "submit", str(sweep_file), "--address", cluster.dashboard)
    assert submitted.returncode == 0, submitted.stderr
    job_id = _job_id(submitted.stdout)
    root = tmp_path / "runs" / "lossy"
    worker = _worker(cluster)

    def a_trial_on_the_worker_with_2_epochs() -> str | None:
        for trial, nodes in _nodes_per_epoch(root).items() if (root / "history").is_dir() else []:
            if len(nodes) >= 2 and nodes[-1] == worker.node_id:
                return trial
        return None

    trial = cluster.wait_for(a_trial_on_the_worker_with_2_epochs, "a trial on the worker node to report 2 epochs")
    cluster.kill(worker)  # SIGKILL: raylet, workers and all, mid-epoch
    cluster.add_worker()  # room for the retry, as an autoscaler would bring

    follow = _cli(cluster, "jobs", "--address", cluster.dashboard)
    assert job_id in follow.stdout, follow.stdout
    cluster.wait_for(lambda: _job_info(cluster, job_id)["status"] in ("SUCCEEDED", "FAILED", "STOPPED"), "the job")
    assert _job_info(cluster, job_id) == {"status": "SUCCEEDED", "exit": 0}

    rows = trial_histories(SweepFolder(root))[trial]
    assert [row["epoch"] for row in rows] == list(range(1, epochs + 1)), "epochs repeated or lost"
    # What came after its last epoch on the lost node. (Not "after the kill returned": the
    # restarted trial can finish its remaining epochs while the kill is still waiting for
    # the node's processes to go, as it did once in CI.)
    last_on_lost = max(index for index, row in enumerate(rows) if row["nodes"] == worker.node_id)
    restarted = rows[last_on_lost + 1 :]
    assert restarted, "the trial did not go on after its node was lost"
    assert restarted[0]["resumed_from"] == trial, "the restart did not load the trial's own checkpoint"
    first = restarted[0]
    print(f"lost the worker after epoch {last_on_lost + 1}; epoch {first['epoch']} ran on {first['nodes'][:8]}")
    steps = mlflow_children(root)  # one MLflow run per trial (it asserts no duplicate)
    assert steps == {t: [r["epoch"] for r in rs] for t, rs in trial_histories(SweepFolder(root)).items()}
    assert steps[trial] == list(range(1, epochs + 1))
    assert_no_leaks_on(cluster.address, env=cluster.env)


def test_a_detached_service_spans_the_nodes_and_stop_by_address_takes_it_down(cluster, tmp_path):
    """``tuner serve --address --detach``: the command ends, the service stays on the
    cluster (autoscaled from 2 replicas: one on each node, tuner shipped to them) until
    ``--stop --address``."""
    _ensure_worker(cluster)
    test = load_test_split("mnist", str(data_root()), download=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = train_tiny_cnn(test.images[2000:4000], test.labels[2000:4000])
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path / "best"
    write_package(folder, model, export_config("state_dict", sweep="cluster_serve"), {"trial_id": "trial_00003"})
    port, serve = free_port(), ("serve", str(folder), "--address", cluster.address)
    done = _cli(cluster, *serve, "--port", str(port), "--autoscale", "2..3", "--cpus", "1", "--detach", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "left running on the cluster" in done.stdout, done.stdout
    url = f"http://127.0.0.1:{port}"
    try:
        expected, _ = load_best(folder).predict(test.images[:4])
        for index in range(4):
            status, answer = http_post(url + "/predict", png_bytes(test.images[index, 0]), "image/png")
            assert status == 200 and answer["predictions"][0]["class"] == expected[index], answer
        replicas = _serve_replicas(cluster)
        assert set(replicas) == {node.node_id for node in cluster.nodes}, replicas  # one replica on each node
        # A replica lost after the command ended comes back: what it needs (tuner, the model)
        # outlives the driver that deployed it.
        lost = replicas[_worker(cluster).node_id]
        os.kill(lost, signal.SIGKILL)

        def replaced() -> dict[str, int] | None:
            now = _serve_replicas(cluster)
            return now if len(now) == 2 and lost not in now.values() else None

        back = cluster.wait_for(replaced, "a new replica on the worker node")
        assert http_post(url + "/predict", png_bytes(test.images[0, 0]), "image/png")[0] == 200, back
        again = _cli(cluster, *serve, "--port", str(port), "--detach", timeout=300)
        assert again.returncode == 2 and "already runs on this Ray" in again.stderr, again.stderr
        assert len(again.stderr.strip().splitlines()) == 1
        assert http_get(url + "/model")[1]["trial_id"] == "trial_00003"  # the first still serves
    finally:
        stopped = _cli(cluster, "serve", "--stop", "--address", cluster.address, timeout=300)
    assert stopped.returncode == 0 and "stopped the tuner service" in stopped.stdout, stopped.stderr
    with pytest.raises(OSError):
        http_get(url + "/healthz")
    assert_no_leaks_on(cluster.address, env=cluster.env)  # Serve's controller and proxy gone too
    twice = _cli(cluster, "serve", "--stop", "--address", cluster.address, timeout=300)
    assert twice.returncode == 2 and "no tuner service runs on" in twice.stderr, twice.stderr


def test_a_lost_head_is_named_by_jobs_and_status_and_the_sweep_resumes_on_a_new_cluster(cluster, tmp_path):
    """Last: it replaces the module's cluster. The new cluster starts under load, and the
    sweep is submitted to it at once: submit waits for its job agent, however slow."""
    _ensure_worker(cluster)
    epochs = 60  # Tune saves its state every 10 s or more: far more epochs than that, for a trial still running
    sweep_file = _file(
        tmp_path, "headless", data={"train_subset": 1000}, train={"epochs": epochs}, trials={"num_samples": 2}
    )
    submitted = _cli(cluster, "submit", str(sweep_file), "--address", cluster.dashboard)
    assert submitted.returncode == 0, submitted.stderr
    root = tmp_path / "runs" / "headless"
    # Tune restores each trial from the checkpoint its saved state names; it saves that
    # state every 10 s or more, so wait until it holds 2 epochs of a trial still running.
    saved = cluster.wait_for(lambda: _tune_saved_epochs(root, lambda count: 2 <= count < epochs), "Tune's state")

    old_dashboard, old_address = cluster.dashboard, cluster.address
    drivers = cluster.job_driver_pids()
    cluster.kill(next(node for node in cluster.nodes if node.head))  # the head's machine is gone ...
    for pid in drivers:  # ... with the job's driver on it
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for node in list(cluster.nodes):  # a worker node without its head is of no use
        cluster.kill(node)
    before = {trial: len(rows) for trial, rows in trial_histories(SweepFolder(root)).items()}
    cut = [trial for trial, count in saved.items() if 2 <= count and before.get(trial, 0) < epochs]
    assert cut, (saved, before)

    jobs = _cli(cluster, "jobs", "--address", old_dashboard)
    assert jobs.returncode == 2 and len(jobs.stderr.strip().splitlines()) == 1, jobs.stdout + jobs.stderr
    assert old_dashboard in jobs.stderr and "resume" in jobs.stderr, jobs.stderr
    status = _cli(cluster, "status", str(root))
    assert status.returncode == 0, status.stderr
    port = old_address.rsplit(":", 1)[1]  # the driver records the address Ray resolved, maybe not 127.0.0.1
    [gone] = [line for line in status.stdout.splitlines() if f":{port} does not answer" in line]
    assert f"resume {root}" in gone, status.stdout

    with busy_cpus(2):  # a loaded machine: the new head's job agent comes up late
        cluster.start_head(1)
        cluster.add_worker(1)
        resumed = _cli(
            cluster, "submit", str(root), "--address", cluster.dashboard, "--follow", "--cluster-timeout", "600"
        )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    histories = trial_histories(SweepFolder(root))
    assert len(histories) == 2
    for trial, rows in histories.items():
        assert [row["epoch"] for row in rows] == list(range(1, epochs + 1)), trial  # continued, none repeated
    # Each cut trial went on from its own checkpoint, no older than Tune's saved state names
    # (it may have saved a later one since). Tune takes an epoch's result, then its
    # checkpoint, in two steps: a state saved between them names the epoch before's.
    for trial in cut:
        resumed = [row["epoch"] for row in histories[trial] if row["resumed_from"] == trial]
        assert resumed and saved[trial] <= resumed[0] <= before[trial] + 1, (trial, saved, before, resumed)
    assert mlflow_children(root) == {trial: list(range(1, epochs + 1)) for trial in histories}
    assert (root / "best" / "metrics.json").is_file()
    assert_no_leaks_on(cluster.address, env=cluster.env)


def test_an_unreachable_dashboard_is_one_line():
    refused = tuner_cli("jobs", "--address", f"http://127.0.0.1:{free_port()}")  # bound, released: nothing there
    assert refused.returncode == 2
    assert "cannot reach the Ray dashboard" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
