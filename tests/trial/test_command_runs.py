"""Commands that are not tuner's own, tuned as they are on a real local Ray (one per module):
a script printing Katib-style lines read through metric_pattern, writing its model to its
working folder, and an unchanged torchrun DDP script (examples/torchrun_ddp) on two Ray
Train workers."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from integration_helpers import data_root, mlflow_children, tensorboard_steps

from tuner.driver.sweep import run_sweep
from tuner.folder.records import trial_histories
from tuner.sweepfile.load import load_sweep
from tuner.usercode import snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

KATIB_SCRIPT = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
model = torch.nn.Linear(4, 2)
for epoch in range(1, args.epochs + 1):
    torch.save({"lr": args.lr, "epoch": epoch, "model": model.state_dict()}, "model.pt")  # relative, as scripts do
    print(f"Epoch {epoch}/{args.epochs} - loss: {1 / (epoch + args.lr):.4f} - val_acc: {args.lr * epoch:.4f}")
"""

KATIB_SWEEP = """
name: katib
command: ["python", "train.py", "--lr", "{lr}", "--epochs", "{epochs}"]
metric_pattern: 'Epoch (?P<epoch>\\d+)/\\d+ - loss: (?P<loss>[\\d.]+) - val_acc: (?P<val_acc>[\\d.]+)'
metric: val_acc
mode: max
train: {epochs: 2}
space: {params: {lr: {grid: [0.1, 0.3]}}}
trials: {num_samples: 1}
"""


def test_a_katib_style_script_is_tuned_through_metric_pattern_and_writes_in_its_own_trial_folder(local_ray, tmp_path):
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(KATIB_SCRIPT)
    (code / "sweep.yaml").write_text(KATIB_SWEEP)
    outcome = run_sweep(load_sweep(str(code / "sweep.yaml"), [f"output_dir={tmp_path / 'runs'}"]))

    histories = trial_histories(outcome.folder)
    assert len(histories) == 2 and not outcome.results.errors
    for trial_id, rows in histories.items():
        lr = rows[0]["val_acc"]  # epoch 1's val_acc is the trial's lr
        assert [(row["epoch"], row["script_epoch"]) for row in rows] == [(1, 1.0), (2, 2.0)]
        assert [row["val_acc"] for row in rows] == [pytest.approx(lr), pytest.approx(2 * lr)]
        assert [row["loss"] for row in rows] == [
            pytest.approx(1 / (1 + lr), abs=1e-4),
            pytest.approx(1 / (2 + lr), abs=1e-4),
        ]
        (folder,) = outcome.folder.tune.glob(f"trial_driver_{trial_id}_*")
        saved = torch.load(folder / "model.pt", weights_only=True)  # the trial's own file: its lr, its last epoch
        assert (saved["lr"], saved["epoch"]) == (pytest.approx(lr), 2)
    assert sorted(round(rows[0]["val_acc"], 3) for rows in histories.values()) == [0.1, 0.3]
    assert outcome.best["val_acc"] == pytest.approx(0.6)
    root = outcome.folder.root  # every record: MLflow's curves and TensorBoard's, as their clients read them
    assert mlflow_children(root, "val_acc") == {trial: [1, 2] for trial in histories}
    assert tensorboard_steps(root, "ray/tune/val_acc") == [[1, 2]] * 2
    snapshots = Path(tempfile.gettempdir()) / "tuner-code"
    assert not list(code.rglob("model.pt")) and not list((outcome.folder.root / "code").rglob("model.pt"))
    assert not any((snapshot / "model.pt").exists() for snapshot in snapshots.iterdir())


def test_an_unchanged_torchrun_script_runs_on_two_train_workers_rank_0s_lines_the_reports(local_ray, tmp_path):
    """examples/torchrun_ddp at smoke size: its script calls init_process_group() from the
    environment, trains with DDP and all_reduces its validation counts; rank 0 prints."""
    sweep = load_sweep(
        str(EXAMPLES / "torchrun_ddp" / "sweep.yaml"),
        [
            f"output_dir={tmp_path / 'runs'}",
            "train.epochs=2",
            "trials.num_samples=1",
            "scheduler={name: fifo}",
            "space.params.lr=3.0e-3",
            "space.params.hidden=64",
            "space.params.train_size=2000",
            "tracking.mlflow.registry=false",
        ],
    )
    data_root()  # MNIST's IDX files under $TUNER_DATA_DIR, which Ray's workers inherited (tests/conftest.py)
    outcome = run_sweep(sweep)

    assert not outcome.results.errors
    ((trial_id, rows),) = trial_histories(outcome.folder).items()
    assert [row["epoch"] for row in rows] == [1, 2] and [row["script_epoch"] for row in rows] == [1.0, 2.0]
    assert all(row["world"] == 2.0 and row["world_size"] == 2 for row in rows)  # the script's WORLD_SIZE, and Train's
    assert rows[-1]["val_accuracy"] > 0.5, rows  # it learned: chance is 0.1
    state = torch.load(outcome.folder.best / "checkpoint" / "state.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 2  # rank 0's checkpoint, from $TUNER_CHECKPOINT_DIR
    assert not (EXAMPLES / "torchrun_ddp" / "model.pt").exists()
    # every rank's output is in its own trial folder: rank 0's lines and rank 1's
    logs = {log.name: log.read_text() for log in _trial_folders(outcome, trial_id) for log in log.glob("command*.log")}
    assert "Epoch 2 | world 2 |" in logs["command.log"] and "command-rank1.log" in logs, sorted(logs)
    [folder] = outcome.folder.tune.glob(f"trial_driver_{trial_id}_*")
    assert (folder / "command.log").is_file()  # rank 0's, beside the trial's records in the sweep
    assert not _running(snapshot.read(outcome.folder.root / "code").materialise()), "a rank's command outlived it"
    assert mlflow_children(outcome.folder.root, "val_accuracy") == {trial_id: [1, 2]}
    assert tensorboard_steps(outcome.folder.root, "ray/tune/val_accuracy") == [[1, 2]]


def _trial_folders(outcome, trial_id: str) -> list[Path]:
    """The folders a TorchTrainer trial's ranks work in: the sweep's tune/<trial>/, or one of
    their own on their node (tuner/trial/own.py)."""
    local = Path(tempfile.gettempdir()) / "tuner-trials"
    return [*outcome.folder.tune.glob(f"trial_driver_{trial_id}_*"), *local.glob(f"{trial_id}*")]


def _running(code: Path) -> list[str]:
    """The command lines of the processes still running a script of ``code``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if str(code) in text:
            found.append(text)
    return found
