"""The export of a sweep whose trials ran the user's own function or command.

With a ``model.factory`` beside it, the best checkpoint's ``model.pt`` (the state dict the
user's code saved) loads into the factory's model, and the export is a model like any
other: ``predict``, the registered MLflow model. Without one, ``best/checkpoint/`` is the
best checkpoint as the user's code saved it, beside config.yaml and metrics.json, and
``predict`` says it is not available.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tuner.errors import TunerError
from tuner.folder import records
from tuner.models.factory import DATA_KEYWORDS
from tuner.results.export import (
    MODEL_FILE,
    ExportedModel,
    _plain,
    _where,
    best_trial_checkpoint,
    check_destination,
    code_folder,
    evaluate_chunks,
    objectives_record,
    write_package,
)
from tuner.trial.context import CHECKPOINT_RECORD
from tuner.usercode import names


def export_best(
    sweep: Any,
    folder: Any,
    results: Any,
    *,
    to: Path | None = None,
    format: str = "state_dict",
    overwrite: bool = False,
) -> ExportedModel:
    """Write ``best/`` (or ``to``) for a sweep of the user's code: the best trial's model,
    rebuilt by its factory, or its checkpoint as saved (``format``: state_dict only)."""
    if format != "state_dict":
        raise TunerError(f"--format {format}: a sweep of your own code exports state_dict only")
    to = Path(to or folder.best)
    check_destination(to, overwrite=overwrite)
    best, checkpoint, val_metrics = best_trial_checkpoint(results, folder, sweep, required=sweep.has_model)
    return _export(sweep, folder, best, checkpoint, val_metrics, to=to, overwrite=overwrite)


def exporter(sweep: Any) -> Any:
    """The export for a sweep: tuner's loop's (tuner/results/export.py) or this module's."""
    from tuner.results import export

    return export_best if sweep.own_loop else export.export_best


def _export(
    sweep: Any, folder: Any, best: Any, checkpoint: Any, val_metrics: dict[str, Any], *, to: Path, overwrite: bool
) -> ExportedModel:
    sampled = {k: _plain(v) for k, v in best.config.items()}
    reported = {k: float(val_metrics[k]) for k in records.trial_metrics(val_metrics)}
    config: dict[str, Any] = {
        "sweep": sweep.name,
        "trial_id": val_metrics["trial_id"],
        "epoch": int(val_metrics["training_iteration"]),
        "hyperparameters": sampled,
        "trainable": sweep.trainable,
        "command": sweep.command,
        "objective": sweep.objective,
        "metric": objectives_record(sweep, val_metrics),
    }
    metrics: dict[str, Any] = {
        "trial_id": config["trial_id"],
        "epoch": config["epoch"],
        **reported,
        "checkpoint": _where(checkpoint) if checkpoint is not None else None,
    }
    if checkpoint is None:  # the function saved none: the record of its best epoch only
        config["predict"] = "not available: the sweep names no model.factory to rebuild the model"
        write_package(to, None, config, metrics, overwrite=overwrite, code=_code(sweep, folder))
        return ExportedModel(None, config, metrics)
    with checkpoint.as_directory() as checkpoint_dir:
        checkpoint_dir = Path(checkpoint_dir)
        if not sweep.has_model:
            config["predict"] = "not available: the sweep names no model.factory to rebuild the model"
            write_package(
                to, None, config, metrics, overwrite=overwrite, checkpoint=checkpoint_dir, code=_code(sweep, folder)
            )
            return ExportedModel(None, config, metrics)
        return _export_model(sweep, folder, checkpoint_dir, config, metrics, sampled, to=to, overwrite=overwrite)


def _export_model(
    sweep, folder, checkpoint_dir: Path, config, metrics, sampled, *, to: Path, overwrite: bool
) -> ExportedModel:
    from tuner.data.planning import held_out
    from tuner.models.build import build_model

    weights = checkpoint_dir / MODEL_FILE
    if not weights.is_file():
        saved = ", ".join(sorted(p.name for p in checkpoint_dir.iterdir() if p.name != CHECKPOINT_RECORD)) or "nothing"
        raise TunerError(
            f"{folder.where}: the best checkpoint holds {saved} but no {MODEL_FILE}; to export through model.factory, "
            f"save the model's state dict as {MODEL_FILE} in the checkpoint folder you report"
        )
    code = code_folder(sweep, folder)
    # The trial's values that the factory's signature takes (the function built its model so).
    function = names.load(sweep.model.factory, code, field="model.factory")
    taken = names.accepted_keywords(function, [k for k in sampled if k not in DATA_KEYWORDS])
    options = {**sweep.model.model_dump(exclude={"name"}), **{k: sampled[k] for k in taken}}
    held = held_out(sweep.data, seed=sweep.seed, folder=folder) if sweep.uses_data else None
    recorded = records.read_data_description(folder)
    described = recorded["data"] if recorded else held.describe() if held is not None else None
    shape = described or {"channels": 3, "num_classes": 0, "size": 0}
    model = build_model(
        "factory",
        in_channels=shape["channels"],
        num_classes=shape["num_classes"],
        image_size=shape["size"],
        options=options,
        code_folder=code,
    )
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    config.update(model={"name": "factory", "options": options}, data=described, format="state_dict")
    exported = ExportedModel(model, config, {})
    example = None
    if held is not None:
        test_loss, test_accuracy, test_images = evaluate_chunks(exported, held.test_chunks())
        metrics.update(test_accuracy=test_accuracy, test_loss=test_loss, test_images=test_images)
        example = held.examples()
    write_package(to, model, config, metrics, example=example, overwrite=overwrite, code=code)
    exported.metrics, exported.example = metrics, example
    return exported


def _code(sweep: Any, folder: Any) -> Path | None:
    return folder.code if folder.code.is_dir() else None
