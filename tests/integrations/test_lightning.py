"""tuner's Lightning callback (tuner/integrations/lightning.py): a user's ``lightning.Trainer``
reports each epoch with its checkpoint through one added line, in a training function
(``trainable:``) and in a script (``command:``); without a tuner trial it stops at once.
The fast tests run a tiny module in this process; the integration ones sweep
examples/lightning_mnist through the real CLI, both ways."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from callback_helpers import FIFO, fake_trial, mlflow_steps, sweep_example
from integration_helpers import tensorboard_hparams, tensorboard_steps

from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder
from tuner.integrations.report import NoTrialError
from tuner.trial.command import parse_line

pytest.importorskip("lightning", reason="the dev extra (and tuner[lightning]) installs lightning")
from tiny_lightning import Tiny, loader, trainer  # noqa: E402

from tuner.integrations.lightning import TunerCallback  # noqa: E402


def test_the_frameworks_are_imported_only_by_their_own_module():
    shown = subprocess.run(
        [sys.executable, "-c", "import json, sys, tuner.integrations.report; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    loaded = set(json.loads(shown.stdout))
    assert not loaded & {"lightning", "pytorch_lightning", "transformers"}


def test_without_lightning_the_import_names_the_extra_to_install(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning", "tuner.integrations.lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # None: "not installed" to the import system
    del sys.modules["tuner.integrations.lightning"]
    with pytest.raises(ImportError, match=r"needs PyTorch Lightning: pip install 'tuner\[lightning\]'$"):
        importlib.import_module("tuner.integrations.lightning")


def test_without_a_tuner_trial_the_callback_stops_the_fit_with_one_line(monkeypatch):
    for name in ("TUNER_TRIAL_ID", "TUNER_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)
    model = Tiny()
    with pytest.raises(
        NoTrialError, match=r"^TunerCallback: no tuner trial runs this code; run it through `tuner sweep`"
    ):
        trainer(TunerCallback(), 2).fit(model, loader(), loader())
    assert model.steps == 0  # at setup, before any training
    assert TunerCallback.resume_from() is None


def test_in_a_training_function_each_epoch_is_a_report_with_its_checkpoint_and_a_retry_resumes(tmp_path, monkeypatch):
    with fake_trial(tmp_path, monkeypatch, "val_accuracy") as session:
        assert TunerCallback.resume_from() is None  # a fresh start
        trainer(TunerCallback(), 2).fit(Tiny(), loader(), loader(), ckpt_path=TunerCallback.resume_from())
    assert [metrics["epoch"] for metrics, _ in session.reports] == [1, 2]
    for index, (metrics, kept) in enumerate(session.reports):
        assert 0 <= metrics["val_accuracy"] <= 1 and metrics["train_loss"] > 0  # this epoch's train mean too
        state = torch.load(kept / "model.ckpt", weights_only=False)
        assert state["epoch"] == index and "layer.weight" in state["state_dict"] and state["optimizer_states"]
    assert session.reports[1][0]["val_accuracy"] > 0.8  # it learnt (chance is about 1/2)

    first = session.reports[0][1]  # a retry from epoch 1's checkpoint, as tuner hands it back
    with fake_trial(tmp_path, monkeypatch, "val_accuracy", checkpoint=first) as retried:
        assert TunerCallback.resume_from() == str(first / "model.ckpt")
        model = Tiny()
        trainer(TunerCallback(), 2).fit(model, loader(), loader(), ckpt_path=TunerCallback.resume_from())
    assert model.steps == 4  # epoch 2 only (4 batches)
    assert [metrics["epoch"] for metrics, _ in retried.reports] == [2]


def test_in_a_command_each_epoch_is_a_json_line_tuner_reads_after_its_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNER_TRIAL_ID", "abcde_00000")
    monkeypatch.setenv("TUNER_CHECKPOINT_DIR", str(tmp_path / "checkpoint"))
    monkeypatch.setenv("TUNER_RESUME_FROM", "")
    assert TunerCallback.resume_from() is None
    trainer(TunerCallback(), 2).fit(Tiny(), loader(), loader())
    reports = [parse_line(line) for line in capsys.readouterr().out.splitlines()]
    reports = [metrics for metrics in reports if "val_accuracy" in metrics]
    assert len(reports) == 2 and all(metrics["train_loss"] > 0 for metrics in reports)
    state = torch.load(tmp_path / "checkpoint" / "model.ckpt", weights_only=False)
    assert state["epoch"] == 1  # the last epoch's, written before its line

    monkeypatch.setenv("TUNER_RESUME_FROM", str(tmp_path / "checkpoint"))
    assert TunerCallback.resume_from() == str(tmp_path / "checkpoint" / "model.ckpt")


@pytest.mark.timeout(120)
def test_a_command_stopped_by_sigterm_ends_quietly(tmp_path):
    """tuner stops a command trial with SIGTERM: the script ends at once, with no traceback
    (Lightning's own handler would raise SIGTERMException at the next batch, then tear down)."""
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys

        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from tiny_lightning import Tiny, loader, trainer
        from tuner.integrations.lightning import TunerCallback

        trainer(TunerCallback(), 50).fit(Tiny(sleep=0.05), loader(), loader())
        """)
    )
    env = {**os.environ, "TUNER_TRIAL_ID": "abcde_00000", "TUNER_CHECKPOINT_DIR": str(tmp_path / "checkpoint")}
    process = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output = []
    for line in process.stdout:  # until the first epoch's report
        output.append(line)
        if "val_accuracy" in parse_line(line):
            break
    time.sleep(0.2)  # into the second epoch
    process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    # At once: Ray Tune reuses the trial's process for the next trial only if the stopped
    # one's thread (waiting for its command) ends within 2 s (TUNE_FUNCTION_THREAD_TIMEOUT_S).
    assert time.monotonic() - stopped < 1.5
    output.append(process.stdout.read())
    text = "".join(output)
    assert "Traceback" not in text and "TunerCallback: SIGTERM" in text, text[-2000:]


def _checkpoint_of_best(root):
    best = json.loads((root / "best" / "metrics.json").read_text())
    state = torch.load(root / "best" / "checkpoint" / "model.ckpt", map_location="cpu", weights_only=False)
    return best, state


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_lightning_mnist_as_a_training_function(tmp_path, ray_tmp):
    """Two trials x 2 epochs of the example's trainable; each Trainer (max_epochs 10) is
    ended by tuner after its second report."""
    root = sweep_example(
        "lightning_mnist", "sweep.yaml", tmp_path, ray_tmp, "train.epochs=2", "trials.num_samples=2", FIFO
    )
    histories = trial_histories(SweepFolder(root))
    assert len(histories) == 2
    for rows in histories.values():
        assert [row["epoch"] for row in rows] == [1, 2]
        assert all(0 <= row["val_accuracy"] <= 1 and row["train_loss"] > 0 for row in rows)
    best, state = _checkpoint_of_best(root)
    assert best["val_accuracy"] > 0.5  # ten classes: chance is 0.1
    assert best["val_accuracy"] == max(row["val_accuracy"] for rows in histories.values() for row in rows)
    assert state["epoch"] == best["epoch"] - 1 and "net.0.weight" in state["state_dict"]  # the best epoch's
    assert mlflow_steps(root, "val_accuracy") == {trial: [1, 2] for trial in histories}
    assert tensorboard_steps(root, "ray/tune/val_accuracy") == [[1, 2]] * 2
    assert [hparams for hparams, _ in tensorboard_hparams(root)] == [{"lr", "hidden", "dropout"}] * 2


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_lightning_mnist_as_a_command(tmp_path, ray_tmp):
    root = sweep_example(
        "lightning_mnist", "sweep-command.yaml", tmp_path, ray_tmp, "train.epochs=2", "trials.num_samples=1", FIFO
    )
    (rows,) = trial_histories(SweepFolder(root)).values()
    assert [row["epoch"] for row in rows] == [1, 2]
    (log,) = (root / "tune").glob("*/command.log")
    printed = [parse_line(line)["val_accuracy"] for line in log.read_text().splitlines() if line.startswith("{")]
    assert [row["val_accuracy"] for row in rows] == pytest.approx(printed)  # each JSON line was that epoch's report
    best, state = _checkpoint_of_best(root)
    assert best["val_accuracy"] > 0.5
    assert state["epoch"] == best["epoch"] - 1 and "net.0.weight" in state["state_dict"]
    assert list(mlflow_steps(root, "val_accuracy").values()) == [[1, 2]]
    assert tensorboard_steps(root, "ray/tune/val_accuracy") == [[1, 2]]
