"""A user's own code through real sweeps, as users run them (``python -m tuner`` in a
subprocess, a local Ray of its own): a model factory in tuner's loop, a training function,
a command, and the Python entry point. The code lives in a folder of the test's own that
tuner never saw, and is moved away before the export is loaded and before a killed sweep
resumes: what runs is the snapshot tuner kept. Each test checks what a user checks: the
history, MLflow's runs and curves, TensorBoard's scalars, a scheduler's stop, a retry from
a checkpoint, ``status``'s reasons, the export."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from integration_helpers import (
    data_root,
    mlflow_trial_runs,
    start_sweep,
    tensorboard_hparams,
    tensorboard_steps,
    tuner_cli,
    wait_for_results,
)

from tuner.cli import main
from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900), pytest.mark.usefixtures("warm_ray")]

MY_MODELS = """
from torch import nn


def build(width=8, num_classes=10, in_channels=1, image_size=28):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(width * (image_size // 2) ** 2, num_classes),
    )
"""

MY_TRAIN = """
import time
from pathlib import Path

import torch


def train(params, context):
    marks = Path(params["marks"])
    with open(marks / f"{context.trial_id}.starts", "a") as starts:  # one line per (re)start
        starts.write(f"{context.start_epoch}\\n")
    state = torch.load(context.checkpoint / "state.pt") if context.checkpoint else {"total": 0.0}
    for epoch in range(context.start_epoch, context.max_epochs):
        time.sleep(params.get("sleep", 0))
        failed = marks / f"{context.trial_id}.failed"
        if params.get("fail_at") == epoch + 1 and not failed.exists():
            failed.write_text("once")
            raise RuntimeError("failing once, as asked")
        state["total"] += params["x"]
        folder = context.trial_dir / "state"
        folder.mkdir(exist_ok=True)
        torch.save(state, folder / "state.pt")
        context.report({"score": params["x"] * (epoch + 1), "total": state["total"]}, checkpoint=folder)
"""

TRAIN_SCRIPT = """
import argparse, json, os, signal, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float)
parser.add_argument("--epochs", type=int)
parser.add_argument("--marks")
args = parser.parse_args()
trial = os.environ["TUNER_TRIAL_ID"]


def terminated(signum, frame):
    open(os.path.join(args.marks, trial + ".terminated"), "w").write("SIGTERM")
    sys.exit(0)


signal.signal(signal.SIGTERM, terminated)
if args.x == 0.2:  # a script that ignores SIGTERM: a stop ends it with SIGKILL after the grace period
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(args.marks, trial + ".pid"), "w").write(str(os.getpid()))
if args.x < 0:
    raise SystemExit("the data set is empty")
start, total = 0, 0.0
if os.environ["TUNER_RESUME_FROM"]:
    saved = json.load(open(os.path.join(os.environ["TUNER_RESUME_FROM"], "state.json")))
    start, total = saved["epoch"], saved["total"]
    open(os.path.join(args.marks, trial + ".resumed"), "w").write(str(start))
for epoch in range(start, args.epochs):
    total += args.x
    state_file = os.path.join(os.environ["TUNER_CHECKPOINT_DIR"], "state.json")
    json.dump({"epoch": epoch + 1, "total": total}, open(state_file, "w"))
    print(f"epoch {epoch + 1}: val_accuracy={args.x * (epoch + 1):.4f} total={total}")
    if epoch + 1 == 2 and not os.path.exists(os.path.join(args.marks, trial + ".crashed")):
        open(os.path.join(args.marks, trial + ".crashed"), "w").write("once")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep({0.2: 60.0}.get(args.x, 1.0 if args.x < 0.5 else 0))  # a poor trial is still running when ASHA stops it
"""


FIT = """
import torch
from my_models import build


def train(params, context):
    data = context.data  # the sweep's data section: MNIST here
    scale = lambda images: (torch.from_numpy(images).float() / 255 - data.mean[0]) / data.std[0]
    x, y = scale(data.train.images), torch.from_numpy(data.train.labels).long()
    val_x, val_y = scale(data.val.images), torch.from_numpy(data.val.labels).long()
    model = build(width=params["width"], in_channels=data.channels, image_size=data.size)
    optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])
    if context.checkpoint is not None:
        model.load_state_dict(torch.load(context.checkpoint / "model.pt"))
    for epoch in range(context.start_epoch, context.max_epochs):
        for begin in range(0, len(x), 64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[begin : begin + 64]), y[begin : begin + 64]).backward()
            optimizer.step()
        with torch.no_grad():
            accuracy = (model(val_x).argmax(1) == val_y).float().mean()
        folder = context.trial_dir / "saved"
        folder.mkdir(exist_ok=True)
        torch.save(model.state_dict(), folder / "model.pt")  # what the export rebuilds the factory's model from
        context.report({"val_accuracy": accuracy}, checkpoint=folder)
"""


def _code(tmp_path: Path) -> Path:
    """The user's folder: their modules and script, and nothing of tuner's."""
    folder = tmp_path / "my_project"
    folder.mkdir()
    (folder / "my_models.py").write_text(MY_MODELS)
    (folder / "my_train.py").write_text(MY_TRAIN)
    (folder / "train.py").write_text(TRAIN_SCRIPT)
    (folder / "fit.py").write_text(FIT)
    return folder


def _write(folder: Path, name: str, sweep: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **sweep}, sort_keys=False))
    return path


def _env(ray_tmp: Path) -> dict[str, str]:
    return {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}


def _mlflow_runs(root: Path, metric: str) -> dict[str, tuple[dict[str, str], list[int]]]:
    """Trial id -> (its MLflow params, the steps of ``metric``), from the sweep's nested runs."""
    return {trial: (params, steps) for trial, (params, steps, _) in mlflow_trial_runs(root, metric).items()}


def _mlflow_tags_by(root: Path, param: str) -> dict[str, dict[str, str]]:
    """The value of ``param`` -> the tags of the trial run that had it, under this sweep's parent run."""
    from mlflow.tracking import MlflowClient

    state = json.loads((root / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], f"tags.mlflow.parentRunId = '{state['parent_run_id']}'")
    return {run.data.params[param]: run.data.tags for run in runs}


def _tensorboard_hparams(root: Path) -> list[tuple[set[str], bool]]:
    """Per trial: the hyperparameters in TensorBoard's HParams, and whether score is among its metrics."""
    return [(hparams, "ray/tune/score" in metrics) for hparams, metrics in tensorboard_hparams(root)]


def test_a_model_factory_trains_in_tuners_loop_and_its_export_loads_without_the_users_folder(tmp_path, ray_tmp):
    code = _code(tmp_path)
    sweep_file = _write(
        code,
        "factory",
        {
            "output_dir": str(tmp_path / "runs"),
            "data": {"dataset": "mnist", "train_subset": 1500, "download": False},
            "model": {"factory": "my_models:build", "width": 4},
            "train": {"epochs": 2, "batch_size": 64, "lr": 3e-3},
            "space": {"params": {"width": {"grid": [4, 8]}}},
            "trials": {"num_samples": 1},
            # width 4 has 7,890 parameters, width 8 15,770 (issue 42): the best is the feasible one
            "constraints": ["params < 10000"],
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "constraints params < 10000: searcher random cannot model them, so they only filter" in done.stdout
    root = tmp_path / "runs" / "factory"
    metrics = json.loads((root / "best" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.5, metrics  # it trained: well above chance on 10,000 test images
    tags = _mlflow_tags_by(root, "width")
    assert (tags["4"]["tuner.feasible"], tags["8"]["tuner.feasible"]) == ("true", "false")
    assert tags["8"]["tuner.violated"] == "params < 10000 (got 15770)" and "tuner.violated" not in tags["4"]
    assert metrics["trial_id"] == tags["4"]["tuner.trial_id"]  # width 8 may score higher; it misses the budget
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # `tuner status`, in this process: no second interpreter to wait for
        assert main(["status", str(root)]) == 0
    status = printed.getvalue()
    assert re.search(rf"{tags['8']['tuner.trial_id']}\s+finished\s+2\s+\S+\s+\d\s+NO\b", status), status
    assert re.search(rf"{tags['4']['tuner.trial_id']}\s+finished\s+2\s+\S+\s+\d\s+yes\b", status), status
    assert f"best so far: {metrics['trial_id']} at epoch" in status
    assert re.search(r"registered model 'mnist_my_models\.build' version 1", done.stdout), done.stdout

    runs = _mlflow_runs(root, "val_accuracy")
    assert sorted(params["width"] for params, _ in runs.values()) == ["4", "8"]
    assert [steps for _, steps in runs.values()] == [[1, 2], [1, 2]]
    assert tensorboard_steps(root, "ray/tune/val_accuracy") == [[1, 2], [1, 2]]

    code.rename(tmp_path / "moved_away")  # the export must not need the user's folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = textwrap.dedent(f"""
        import json, mlflow, numpy as np
        from tuner.results.export import load_best, evaluate
        from tuner.data.datasets import load_test_split
        exported = load_best({str(root / "best")!r})
        test = load_test_split("mnist", {str(data_root())!r}, download=False)
        loss, accuracy = evaluate(exported, test.images[:2000], test.labels[:2000])
        mlflow.set_tracking_uri("sqlite:///{tmp_path / "runs" / "mlflow.db"}")
        served = mlflow.pyfunc.load_model("models:/mnist_my_models.build/1")
        frame = served.predict(test.images[:200])
        print(json.dumps({{"accuracy": accuracy, "served": float((frame["class"].values == test.labels[:200]).mean()),
                          "module": type(exported.model[0]).__module__}}))
    """)
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=elsewhere, timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    seen = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert seen["accuracy"] > 0.5 and seen["served"] > 0.5, seen
    assert (root / "best" / "code" / "my_models.py").read_text() == MY_MODELS


def test_a_training_function_is_stopped_by_asha_and_retried_from_its_checkpoint(tmp_path, ray_tmp):
    code = _code(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    sweep_file = _write(
        code,
        "function",
        {
            "output_dir": str(tmp_path / "runs"),
            "trainable": "my_train:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 3},
            "space": {"params": {"x": {"grid": [0.9, 0.1]}, "fail_at": 2, "marks": str(marks)}},
            "scheduler": {"name": "asha", "grace_period": 1, "reduction_factor": 2},
            "trials": {"num_samples": 1, "max_concurrent": 1, "max_failures": 1},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "function"
    histories = trial_histories(SweepFolder(root))
    by_x = {round(rows[0]["score"], 3): (trial, rows) for trial, rows in histories.items()}
    good, good_rows = by_x[0.9]
    poor, poor_rows = by_x[0.1]
    # retried from its epoch-1 checkpoint: the second start began at epoch 1, the state carried on
    assert (marks / f"{good}.starts").read_text().split() == ["0", "1"]
    assert [row["epoch"] for row in good_rows] == [1, 2, 3]
    assert [round(row["total"], 3) for row in good_rows] == [0.9, 1.8, 2.7]
    # ASHA stopped the poor trial at its first rung
    assert [row["epoch"] for row in poor_rows] == [1]
    status = tuner_cli("status", str(root))
    assert re.search(rf"{poor}\s+stopped_early\s+1\b", status.stdout), status.stdout
    assert re.search(rf"{good}\s+finished\s+3\b", status.stdout), status.stdout
    # the user's own metrics in MLflow and TensorBoard
    runs = _mlflow_runs(root, "score")
    assert runs[good][1] == [1, 2, 3] and runs[poor][1] == [1]
    assert runs[good][0]["x"] == "0.9"
    assert sorted(tensorboard_steps(root, "ray/tune/total")) == [[1], [1, 2, 3]]
    assert _tensorboard_hparams(root) == [({"x"}, True)] * 2  # the searched value; the constants are not
    # no model factory: best/ is the best checkpoint as the function saved it
    best = json.loads((root / "best" / "metrics.json").read_text())
    assert best["trial_id"] == good and best["epoch"] == 3 and best["score"] == pytest.approx(2.7)
    assert (root / "best" / "checkpoint" / "state.pt").is_file()
    predicted = tuner_cli("predict", str(root / "best"), "--data", "mnist:test", "--out", str(tmp_path / "p.csv"))
    assert predicted.returncode == 2 and "predict needs a model.factory" in predicted.stderr, predicted.stderr


def test_a_training_function_with_a_model_factory_beside_it_exports_and_registers_that_model(tmp_path, ray_tmp):
    code = _code(tmp_path)
    sweep_file = _write(
        code,
        "fitted",
        {
            "output_dir": str(tmp_path / "runs"),
            "data": {"dataset": "mnist", "train_subset": 1000, "download": False},
            "trainable": "fit:train",
            "model": {"factory": "my_models:build"},
            "train": {"epochs": 2},
            "space": {"params": {"width": {"grid": [4, 8]}, "lr": 3e-3}},
            "trials": {"num_samples": 1},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "registered model 'mnist_my_models.build' version 1" in done.stdout, done.stdout
    root = tmp_path / "runs" / "fitted"
    best = json.loads((root / "best" / "metrics.json").read_text())
    config = yaml.safe_load((root / "best" / "config.yaml").read_text())
    assert best["test_accuracy"] > 0.5 and best["test_images"] == 10_000, best  # the rebuilt model, scored
    assert config["model"]["options"]["width"] == config["hyperparameters"]["width"]  # built as the trial built it
    code.rename(tmp_path / "gone")
    predicted = tuner_cli("predict", str(root / "best"), "--data", "mnist:test", "--out", str(tmp_path / "p.csv"))
    assert predicted.returncode == 0, predicted.stderr
    assert float(predicted.stdout.rsplit(" ", 1)[-1]) == pytest.approx(best["test_accuracy"], abs=1e-4)


def test_a_command_reports_its_lines_resumes_from_its_checkpoint_and_is_ended_by_a_stop(tmp_path, ray_tmp):
    code = _code(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    sweep_file = _write(
        code,
        "command",
        {
            "output_dir": str(tmp_path / "runs"),
            "command": ["python", "train.py", "--x", "{x}", "--epochs", "{epochs}", "--marks", "{marks}"],
            "train": {"epochs": 3},
            "space": {"params": {"x": {"grid": [0.9, 0.1, -1.0, 0.2]}, "marks": str(marks)}},
            "scheduler": {"name": "asha", "grace_period": 1, "reduction_factor": 2},
            "trials": {"num_samples": 1, "max_concurrent": 1, "max_failures": 1},
        },
    )
    started = time.monotonic()
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "command"
    histories = trial_histories(SweepFolder(root))
    trials = {row["trial_id"]: row for rows in histories.values() for row in rows[:1]}
    good = next(t for t, row in trials.items() if row["val_accuracy"] == pytest.approx(0.9))
    poor = next(t for t, row in trials.items() if row["val_accuracy"] == pytest.approx(0.1))
    # SIGKILLed after its epoch-2 line, retried from that epoch's checkpoint through TUNER_RESUME_FROM
    assert (marks / f"{good}.resumed").read_text() == "2"
    assert [(row["epoch"], round(row["total"], 2)) for row in histories[good]] == [(1, 0.9), (2, 1.8), (3, 2.7)]
    # ASHA's stop reached the script as SIGTERM
    assert [row["epoch"] for row in histories[poor]] == [1]
    assert (marks / f"{poor}.terminated").read_text() == "SIGTERM"
    # one that ignores SIGTERM is SIGKILLed after the grace period, not left running (nor waited for)
    deaf = next(t for t, row in trials.items() if row["val_accuracy"] == pytest.approx(0.2))
    assert [row["epoch"] for row in histories[deaf]] == [1]
    assert _ends(int((marks / f"{deaf}.pid").read_text()))
    assert not (marks / f"{deaf}.terminated").exists()
    assert took < 60, took  # its 60 s sleep was cut short
    status = tuner_cli("status", str(root))
    assert re.search(r"errored: command exited with status 1: the data set is empty \(its output: tune/", status.stdout)
    [log] = (root / "tune").glob(f"trial_driver_{good}_*/command.log")
    assert "epoch 3: val_accuracy=2.7000" in log.read_text()


EXPLOITED = """
import json
import sys
import time
from pathlib import Path


def train(params, context):
    state = {"owner": context.trial_id, "total": 0.0}
    if context.checkpoint is not None:
        state = json.loads((context.checkpoint / "state.json").read_text())
    with open(Path(params["marks"]) / f"{context.trial_id}.starts", "a") as starts:  # (re)start: epoch, whose state
        starts.write(f"{context.start_epoch} {state['owner']} {params['x']} {'torch' in sys.modules}\\n")
    for epoch in range(context.start_epoch, context.max_epochs):
        time.sleep(0.5)
        state["total"] += params["x"]
        folder = context.trial_dir / "state"
        folder.mkdir(exist_ok=True)
        (folder / "state.json").write_text(json.dumps({**state, "owner": context.trial_id}))
        context.report({"score": state["total"]}, checkpoint=folder)
"""


def test_pbt_exploits_a_training_functions_checkpoint_and_perturbs_its_values(tmp_path, ray_tmp):
    code = _code(tmp_path)
    (code / "exploited.py").write_text(EXPLOITED)
    marks = tmp_path / "marks"
    marks.mkdir()
    sweep_file = _write(
        code,
        "pbt_function",
        {
            "output_dir": str(tmp_path / "runs"),
            "trainable": "exploited:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 4},
            "space": {"params": {"x": {"grid": [0.9, 0.1]}, "marks": str(marks)}},
            "scheduler": {
                "name": "pbt",
                "perturbation_interval": 1,
                "quantile_fraction": 0.5,
                "resample_probability": 0.0,
                "mutations": {"x": {"choice": [0.7, 0.8]}},
            },
            "trials": {"num_samples": 1},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    histories = trial_histories(SweepFolder(tmp_path / "runs" / "pbt_function"))
    good = next(t for t, rows in histories.items() if rows[0]["score"] == pytest.approx(0.9))
    poor = next(t for t in histories if t != good)
    starts = [line.split() for line in (marks / f"{poor}.starts").read_text().splitlines()]
    # a function that never imports torch runs in a trial process without it (its 3-4 s import)
    assert {loaded for *_, loaded in starts} == {"False"}, starts
    # the poor trial started again from the good one's checkpoint, with a perturbed x
    cloned = [(int(epoch), float(x)) for epoch, owner, x, _ in starts if owner == good]
    assert cloned and all(epoch >= 1 and x not in (0.1, 0.9) for epoch, x in cloned), starts
    epochs = [row["epoch"] for row in histories[poor]]
    assert epochs == sorted(epochs) and epochs[-1] == 4, epochs  # its history goes on from the clone's epoch
    assert histories[poor][-1]["score"] > 0.9, histories[poor]  # it carries the donor's total


def test_a_killed_sweep_of_a_training_function_resumes_with_the_code_it_began_with(tmp_path, ray_tmp):
    code = _code(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    sweep_file = _write(
        code,
        "killed",
        {
            "output_dir": str(tmp_path / "runs"),
            "trainable": "my_train:train",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 4},
            "space": {"params": {"x": {"grid": [0.2, 0.4]}, "sleep": 1.0, "marks": str(marks)}},
            "trials": {"num_samples": 1},
        },
    )
    process = start_sweep(sweep_file, env=_env(ray_tmp))
    root = tmp_path / "runs" / "killed"
    wait_for_results(root, 3, process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    (code / "my_train.py").write_text("raise ImportError('the code changed since')\n")  # resume uses code/

    resumed = tuner_cli("resume", str(root), env=_env(ray_tmp))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    histories = trial_histories(SweepFolder(root))
    assert sorted([row["epoch"] for row in rows] for rows in histories.values()) == [[1, 2, 3, 4]] * 2
    assert any(len(starts.read_text().split()) > 1 for starts in marks.glob("*.starts")), "nothing resumed"
    runs = _mlflow_runs(root, "score")
    assert sorted(steps for _, steps in runs.values()) == [[1, 2, 3, 4]] * 2


def test_the_python_entry_point_runs_a_dict_and_a_training_function_on_two_ddp_workers(tmp_path, ray_tmp):
    code = _code(tmp_path)
    (code / "ddp_train.py").write_text(
        textwrap.dedent("""
        import torch
        import torch.distributed as dist


        def train(params, context):
            for epoch in range(context.start_epoch, context.max_epochs):
                ranks = torch.tensor([float(context.rank + 1)])
                dist.all_reduce(ranks)  # 1 + 2: both workers took part
                folder = context.trial_dir / "saved"
                folder.mkdir(exist_ok=True)
                (folder / "rank.txt").write_text(str(context.rank))
                context.report({"score": params["x"] * ranks.item(), "world": context.world_size}, checkpoint=folder)
        """)
    )
    script = textwrap.dedent(f"""
        import json
        import tuner

        results = tuner.run(
            {{"name": "api", "output_dir": {str(tmp_path / "runs")!r}, "trainable": "ddp_train:train",
              "metric": "score", "mode": "max", "train": {{"epochs": 2}},
              "scaling": {{"workers": 2, "cpus_per_worker": 1}},
              "space": {{"params": {{"x": {{"grid": [0.5, 1.0]}}}}}}, "trials": {{"num_samples": 1}}}},
            overrides=["train.epochs=1"],
        )
        trials = results.trials
        print(json.dumps({{"scores": sorted(trials["best_score"].tolist()), "status": sorted(trials["status"]),
                          "best": results.best, "export": str(results.export_path),
                          "epochs": results.history["epoch"].tolist()}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=code, timeout=600,
        env={**os.environ, **_env(ray_tmp)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["scores"] == [1.5, 3.0] and seen["status"] == ["finished", "finished"]  # rank 0 and 1 reduced
    assert seen["epochs"] == [1, 1]  # the override took effect
    assert seen["best"]["score"] == 3.0 and seen["best"]["world"] == 2
    assert (Path(seen["export"]) / "checkpoint" / "rank.txt").read_text() == "0"  # rank 0's checkpoint counts


def _ends(pid: int, within_s: float = 15.0) -> bool:
    """Whether the process is gone or dead (a zombie its parent, a trial's Ray worker that
    the sweep's end stops, has not reaped yet) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.2)
    return False
