"""tuner's Transformers callback (tuner/integrations/transformers.py): a user's
``transformers.Trainer`` reports each evaluation with the Trainer's own checkpoint through
one added line, in a training function (``trainable:``) and in a script (``command:``);
without a tuner trial it stops at once. The fast tests train a tiny ResNet (built from a
config) in this process; the integration ones sweep examples/transformers_trainer through
the real CLI, both ways."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from callback_helpers import FIFO, fake_trial, mlflow_steps, sweep_example
from integration_helpers import tensorboard_hparams, tensorboard_steps

from tuner.errors import TunerError
from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder
from tuner.integrations.report import NoTrialError
from tuner.trial.command import parse_line

transformers = pytest.importorskip("transformers", reason="the dev extra (and tuner[transformers]) installs it")
from tuner.integrations.transformers import TunerCallback, named  # noqa: E402


class Points(torch.utils.data.Dataset):
    """64 grey 8 px images; the label is whether the top-left pixel is positive."""

    def __init__(self):
        self.pixels = torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
        self.labels = (self.pixels[:, 0, 0, 0] > 0).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixels[index], "labels": self.labels[index]}


def _accuracy(prediction) -> dict[str, float]:
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def _trainer(output_dir, epochs: int = 2, **arguments) -> transformers.Trainer:
    config = transformers.ResNetConfig(
        num_channels=1, embedding_size=4, hidden_sizes=[4], depths=[1], layer_type="basic", num_labels=2
    )
    args = transformers.TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        per_device_train_batch_size=16,
        learning_rate=1e-2,
        report_to="none",
        disable_tqdm=True,
        **{"eval_strategy": "epoch", **arguments},
    )
    return transformers.Trainer(
        model=transformers.ResNetForImageClassification(config),
        args=args,
        train_dataset=Points(),
        eval_dataset=Points(),
        compute_metrics=_accuracy,
        callbacks=[TunerCallback()],
    )


def test_an_evaluation_is_reported_as_named_and_without_eval_and_only_its_numbers():
    reported = named(
        {"eval_accuracy": np.float64(0.9), "eval_loss": torch.tensor(0.25), "eval_note": "x", "epoch": 1.0, "loss": 0.5}
    )
    # The Trainer's fractional epoch is left to tuner's count; a name taken already keeps its value.
    assert reported == {"eval_accuracy": 0.9, "eval_loss": 0.25, "accuracy": 0.9, "loss": 0.5}


def test_without_a_tuner_trial_the_callback_stops_the_training_with_one_line(tmp_path, monkeypatch):
    for name in ("TUNER_TRIAL_ID", "TUNER_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)
    trainer = _trainer(tmp_path / "out")
    with pytest.raises(
        NoTrialError, match=r"^TunerCallback: no tuner trial runs this code; run it through `tuner sweep`"
    ):
        trainer.train()
    assert trainer.state.global_step == 0  # at on_train_begin, before any step
    assert TunerCallback.resume_from() is None


def test_a_trainer_that_never_evaluates_is_refused_with_what_to_set(tmp_path, monkeypatch):
    with fake_trial(tmp_path, monkeypatch, "accuracy"), pytest.raises(TunerError, match="eval_strategy='epoch'"):
        _trainer(tmp_path / "out", eval_strategy="no").train()


def test_in_a_training_function_each_evaluation_is_a_report_with_the_trainers_checkpoint(tmp_path, monkeypatch):
    with fake_trial(tmp_path, monkeypatch, "accuracy") as session:
        assert TunerCallback.resume_from() is None
        _trainer(tmp_path / "out", save_strategy="no").train(resume_from_checkpoint=TunerCallback.resume_from())
    assert [metrics["epoch"] for metrics, _ in session.reports] == [1, 2]  # tuner's count, not the Trainer's
    for index, (metrics, kept) in enumerate(session.reports):
        # As the Trainer names them and without eval_: metric: accuracy or eval_accuracy.
        assert metrics["accuracy"] == metrics["eval_accuracy"] and metrics["loss"] == metrics["eval_loss"]
        state = json.loads((kept / "trainer_state.json").read_text())
        assert state["global_step"] == 4 * (index + 1)  # saved right after the evaluation (save_strategy: no)
        assert (kept / "model.safetensors").is_file() and (kept / "optimizer.pt").is_file()

    first = session.reports[0][1]  # a retry from epoch 1's checkpoint, as tuner hands it back
    with fake_trial(tmp_path, monkeypatch, "accuracy", checkpoint=first) as retried:
        assert TunerCallback.resume_from() == str(first)
        trainer = _trainer(tmp_path / "retry")
        trainer.train(resume_from_checkpoint=TunerCallback.resume_from())
    assert [metrics["epoch"] for metrics, _ in retried.reports] == [2]
    assert trainer.state.global_step == 8 and sorted(p.name for p in (tmp_path / "retry").iterdir()) == [
        "checkpoint-8"
    ]  # epoch 2 only


def test_in_a_command_each_evaluation_is_a_json_line_after_its_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNER_TRIAL_ID", "abcde_00000")
    monkeypatch.setenv("TUNER_CHECKPOINT_DIR", str(tmp_path / "checkpoint"))
    monkeypatch.setenv("TUNER_RESUME_FROM", "")
    _trainer(tmp_path / "out").train()
    reports = [parse_line(line) for line in capsys.readouterr().out.splitlines()]
    reports = [metrics for metrics in reports if "eval_accuracy" in metrics]
    assert len(reports) == 2 and all(metrics["accuracy"] == metrics["eval_accuracy"] for metrics in reports)
    state = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())
    assert state["global_step"] == 8  # the last evaluation's checkpoint only

    monkeypatch.setenv("TUNER_RESUME_FROM", str(tmp_path / "checkpoint"))
    assert TunerCallback.resume_from() == str(tmp_path / "checkpoint")


def _check_export(root, metric: str) -> dict:
    best = json.loads((root / "best" / "metrics.json").read_text())
    assert best[metric] > 0.5  # ten classes: chance is 0.1
    saved = json.loads((root / "best" / "checkpoint" / "trainer_state.json").read_text())
    assert saved["epoch"] == best["epoch"]  # the Trainer's checkpoint of the best epoch
    assert (root / "best" / "checkpoint" / "model.safetensors").is_file()
    return best


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_transformers_trainer_as_a_training_function(tmp_path, ray_tmp):
    """Two trials x 2 epochs of the example's trainable (metric: accuracy, the eval_accuracy
    without its prefix); each Trainer (10 epochs) is ended by tuner after its second report."""
    root = sweep_example(
        "transformers_trainer", "sweep.yaml", tmp_path, ray_tmp, "train.epochs=2", "trials.num_samples=2", FIFO
    )
    histories = trial_histories(SweepFolder(root))
    assert len(histories) == 2
    for rows in histories.values():
        assert [row["epoch"] for row in rows] == [1, 2]
        assert all(row["accuracy"] == row["eval_accuracy"] for row in rows)
    best = _check_export(root, "accuracy")
    assert best["accuracy"] == max(row["accuracy"] for rows in histories.values() for row in rows)
    assert mlflow_steps(root, "accuracy") == {trial: [1, 2] for trial in histories}
    assert tensorboard_steps(root, "ray/tune/eval_accuracy") == [[1, 2]] * 2
    assert [hparams for hparams, _ in tensorboard_hparams(root)] == [{"lr", "width", "weight_decay"}] * 2


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_transformers_trainer_as_a_command(tmp_path, ray_tmp):
    root = sweep_example(
        "transformers_trainer",
        "sweep-command.yaml",
        tmp_path,
        ray_tmp,
        "train.epochs=2",
        "trials.num_samples=1",
        FIFO,
    )
    (rows,) = trial_histories(SweepFolder(root)).values()
    assert [row["epoch"] for row in rows] == [1, 2]
    _check_export(root, "eval_accuracy")
    assert list(mlflow_steps(root, "eval_accuracy").values()) == [[1, 2]]
    assert tensorboard_steps(root, "ray/tune/eval_accuracy") == [[1, 2]]
