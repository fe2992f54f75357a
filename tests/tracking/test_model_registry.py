"""SweepRecord.finish against a real sqlite MLflow store (no Ray): the best model is logged
on the sweep's parent run, and made a registered version only when
``tracking.mlflow.registry`` is true (a --smoke run's is not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tuner.sweepfile.schema import SweepConfig


def _finish(tmp_path: Path, register: bool) -> tuple[Any, str | None]:
    """A sweep's record, finished with a small CNN as its best model; (record, finish's answer)."""
    from tuner.folder.store import SweepFolder
    from tuner.models.builtin import build_model
    from tuner.results.export import ExportedModel
    from tuner.tracking.mlflow_runs import SweepRecord

    sweep = SweepConfig.model_validate(
        {"name": "reg", "output_dir": str(tmp_path / "runs"), "tracking": {"mlflow": {"registry": register}}}
    )
    folder = SweepFolder(tmp_path / "runs" / "reg")
    (folder.root / "tune").mkdir(parents=True)
    record = SweepRecord(sweep, folder)
    data = {"dataset": "mnist", "mean": [0.1307], "std": [0.3081], "channels": 1, "size": 28, "num_classes": 10}
    best = {"trial_id": "t_00000", "epoch": 2, "val_accuracy": 0.9, "val_loss": 0.3}
    best.update({"test_accuracy": 0.88, "test_loss": 0.35, "test_images": 100})
    folder.best.mkdir()
    (folder.best / "config.yaml").write_text(yaml.safe_dump({"data": data}))
    (folder.best / "metrics.json").write_text(json.dumps(best))
    model = build_model("cnn", in_channels=1, num_classes=10, image_size=28, options={"conv1": 2, "conv2": 4})
    exported = ExportedModel(model, {"data": data}, best, example=np.zeros((2, 1, 28, 28), dtype=np.uint8))
    return record, record.finish(best, folder.best, exported)


@pytest.mark.parametrize("register", [False, True], ids=["not_registered", "registered"])
def test_the_best_model_is_logged_on_the_parent_run_and_registered_only_when_asked(tmp_path, register):
    from mlflow.tracking import MlflowClient

    record, version = _finish(tmp_path, register)
    client = MlflowClient(record.uri)
    versions = client.search_model_versions("name='mnist_cnn'")
    parent = client.get_run(record.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["best_test_accuracy"] == pytest.approx(0.88)
    logged = client.search_logged_models(experiment_ids=[record.experiment_id])
    assert [model.source_run_id for model in logged] == [record.parent_run_id]  # logged either way
    if register:
        assert version == "1" and [str(v.version) for v in versions] == ["1"]
        assert versions[0].run_id == record.parent_run_id and versions[0].tags["trial_id"] == "t_00000"
    else:
        assert version is None and versions == []
        assert client.search_registered_models() == []
        # A resume that changed nothing logs no second model, and still registers nothing.
        again = type(record)(record.sweep, record.folder)
        assert again.finish({"trial_id": "t_00000", "epoch": 2}, record.folder.best, None) is None
        assert len(client.search_logged_models(experiment_ids=[record.experiment_id])) == 1
