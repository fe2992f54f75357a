"""Export the best trial, at its best epoch, as a package loadable without Ray.

``best/`` holds ``model.pt`` (state dict), ``config.yaml`` (everything needed to
rebuild the model and its input normalisation) and ``metrics.json`` (validation
metrics at the chosen epoch, test metrics computed here, trial id and epoch).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from tuner.data.datasets import normalise
from tuner.data.planning import held_out
from tuner.errors import ConfigError, NoFeasibleTrial, TunerError
from tuner.folder import records
from tuner.models.build import build_model

MODEL_FILE, SCRIPT_FILE, CONFIG_FILE, METRICS_FILE = "model.pt", "model.ts", "config.yaml", "metrics.json"
CODE_FOLDER = "code"  # the user's code a factory's model is rebuilt from
CHECKPOINT_FOLDER = "checkpoint"  # a user's training function's best checkpoint, as it saved it
FORMATS = ("state_dict", "torchscript")


@dataclass
class ExportedModel:
    """A model rebuilt from an export folder, ready to predict."""

    model: torch.nn.Module
    config: dict[str, Any]
    metrics: dict[str, Any]
    example: np.ndarray | None = None  # a few uint8 input images, for MLflow's signature

    def example_input(self) -> np.ndarray:
        """The model's input for ``example``: normalised float32 ``[N, C, H, W]``."""
        data = self.config["data"]
        images = torch.from_numpy(np.array(self.example))
        return normalise(images, tuple(data["mean"]), tuple(data["std"])).numpy()

    @torch.no_grad()
    def probabilities(self, images: np.ndarray | torch.Tensor, batch_size: int = 1024) -> np.ndarray:
        """float32 ``[N, K]`` class probabilities for uint8 images ``[N, C, H, W]`` (or ``[N, H, W]``)."""
        data = self.config["data"]
        images = torch.from_numpy(np.array(images)) if isinstance(images, np.ndarray) else torch.as_tensor(images)
        if images.dim() == 3:
            images = images.unsqueeze(1)
        chunks = []
        self.model.eval()
        for begin in range(0, len(images), batch_size):
            x = normalise(images[begin : begin + batch_size], tuple(data["mean"]), tuple(data["std"]))
            chunks.append(self.model(x).softmax(dim=1).numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, int(data["num_classes"])), np.float32)

    def predict(self, images: np.ndarray | torch.Tensor, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """Classes and confidences for uint8 images ``[N, C, H, W]`` (or ``[N, H, W]``)."""
        probabilities = self.probabilities(images, batch_size)
        return probabilities.argmax(axis=1), probabilities.max(axis=1)


def load_best(path: str | Path) -> ExportedModel:
    """Rebuild an exported model (no Ray needed); weights load with ``weights_only=True``."""
    folder = Path(path)
    if not (folder / MODEL_FILE).is_file() and not (folder / SCRIPT_FILE).is_file() and _of_own_code(folder):
        raise TunerError(
            f"{folder}: holds the best checkpoint of a training function of your own, not a model tuner can rebuild; "
            "predict needs a model.factory in the sweep file (see docs/own-code.md)"
        )
    weights = folder / SCRIPT_FILE if (folder / SCRIPT_FILE).is_file() else folder / MODEL_FILE
    missing = [p.name for p in (weights, folder / CONFIG_FILE, folder / METRICS_FILE) if not p.is_file()]
    if missing:
        raise TunerError(f"{folder} is not an exported model folder (missing {', '.join(missing)})")
    try:
        metrics = json.loads((folder / METRICS_FILE).read_text())
        config = yaml.safe_load((folder / CONFIG_FILE).read_text())
        data = config["data"]
        if weights.name == SCRIPT_FILE:
            with warnings.catch_warnings():  # TorchScript is deprecated upstream, still what users ask for
                warnings.simplefilter("ignore", FutureWarning)
                model = torch.jit.load(str(weights), map_location="cpu")
        else:
            model = build_model(
                config["model"]["name"],
                in_channels=data["channels"],
                num_classes=data["num_classes"],
                image_size=data["size"],
                options=config["model"]["options"],
                code_folder=folder / CODE_FOLDER if (folder / CODE_FOLDER).is_dir() else None,
            )
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    except (
        KeyError,
        TypeError,
        ValueError,
        RuntimeError,
        EOFError,
        OSError,
        yaml.YAMLError,
        pickle.UnpicklingError,
    ) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise TunerError(f"{folder}: not a loadable tuner export ({type(error).__name__}: {reason})") from None
    model.eval()
    return ExportedModel(model, config, metrics)


def _of_own_code(folder: Path) -> bool:
    """Whether an export is of a sweep that ran the user's function or command."""
    try:
        config = yaml.safe_load((folder / CONFIG_FILE).read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and "trainable" in config


def best_trial_checkpoint(
    results: Any, folder: Any, sweep: Any, *, required: bool = True
) -> tuple[Any, Any, dict[str, Any]]:
    """The best trial and epoch (tuner.folder.records.best_epoch) and its checkpoint at that epoch.

    Checkpoints are kept by the same metric, so the best epoch's checkpoint is among the
    trial's kept ones. Not ``required`` (a user's function that saves none): None, and
    the epoch's metrics from the history.
    """
    from tuner.folder.records import trial_histories

    metric, mode = sweep.metric, sweep.mode

    # Only the experiment's trials: a trial that reported, then was lost with a crash
    # before Tune saved it, left a history no restored trial continues.
    in_experiment = {r.metrics.get("trial_id") for r in results if r.metrics}
    histories = {k: v for k, v in trial_histories(folder).items() if k in in_experiment}
    best_row = sweep.best_epoch(histories)  # several objectives: the point `select` takes from the front
    if best_row is None and (reason := sweep.nothing_feasible(histories)):
        raise NoFeasibleTrial(f"{folder.where}: {reason}; nothing exported")
    if best_row is None:
        raise TunerError(f"{folder.where}: no trial reported {metric!r} yet; nothing to export")
    best = next((r for r in results if r.metrics and r.metrics.get("trial_id") == best_row.trial_id), None)
    if best is None:
        raise TunerError(f"{folder.where}: trial {best_row.trial_id} is not in the Tune experiment; nothing to export")
    scored = [(c, m) for c, m in best.best_checkpoints if metric in m] or _written_by_trial(
        best, histories[best_row.trial_id], metric
    )
    chosen = {"selected_by": best_row.rule} if best_row.rule else {}
    if not scored and not required:
        return best, None, {**best_row.row, "trial_id": best_row.trial_id, **chosen}
    if not scored:
        raise TunerError(f"{folder.where}: trial {best_row.trial_id} kept no checkpoint; nothing to export")
    at_epoch = [(c, m) for c, m in scored if m.get("training_iteration") == best_row.epoch]
    pick = max if mode == "max" else min
    checkpoint, metrics = pick(at_epoch or scored, key=lambda pair: pair[1][metric])
    return best, checkpoint, {**metrics, **chosen}


def _written_by_trial(result: Any, rows: list[dict[str, Any]], metric: str) -> list[tuple[Any, dict[str, Any]]]:
    """The checkpoints a trial wrote into its own folder (tuner.trial.session.write_own_checkpoint;
    Tune knows none of them), each with its epoch's history row, as Tune pairs its own."""
    from ray import tune

    found = []
    for row in rows:
        name = row.get("checkpoint_dir_name")
        if name and metric in row and (Path(result.path) / name).is_dir():
            found.append((tune.Checkpoint.from_directory(str(Path(result.path) / name)), row))
    return found


def export_best(
    sweep: Any,
    folder: Any,
    results: Any,
    *,
    to: Path | None = None,
    format: str = "state_dict",
    overwrite: bool = False,
) -> ExportedModel:
    """Write ``best/`` (or ``to``) for a sweep; returns the model with its metrics.json content.

    ``format``: ``state_dict`` (model.pt, rebuilt from config.yaml) or ``torchscript``
    (model.ts, loadable with ``torch.jit.load`` alone). The destination is checked
    first (``check_destination``): nothing is computed for a folder it may not write.
    """
    if format not in FORMATS:
        raise TunerError(f"unknown export format {format!r}; choose one of: {', '.join(FORMATS)}")
    from tuner.trial.runner import TrialSetup, model_of, resolve_hyperparameters

    to = Path(to or folder.best)
    check_destination(to, overwrite=overwrite)
    best, checkpoint, val_metrics = best_trial_checkpoint(results, folder, sweep)
    setup = TrialSetup.of(sweep)
    sampled = {k: _plain(v) for k, v in best.config.items()}
    train, model_options = resolve_hyperparameters(setup, sampled)
    model_name = model_of(setup, sampled)  # a choice of models: the best trial's
    try:
        held = held_out(sweep.data, seed=sweep.seed, folder=folder)  # listed once: a Parquet source reads its files
    except ConfigError as error:  # data.path gone since: name the sweep.yaml line, as a sweep does
        raise sweep.locate(error) from None
    recorded = records.read_data_description(folder)  # a user's own data as the sweep saw them
    described = recorded["data"] if recorded else held.describe()
    config = {
        "sweep": sweep.name,
        "trial_id": val_metrics["trial_id"],
        "epoch": int(val_metrics["epoch"]),
        "hyperparameters": sampled,
        "model": {"name": model_name, "options": model_options},
        "train": train,
        "data": described,
        "metric": objectives_record(sweep, val_metrics),
    }
    with checkpoint.as_directory() as saved:  # a checkpoint at a storage URI is fetched first
        state = _load_checkpoint(saved)
    code = code_folder(sweep, folder)
    model = build_model(
        model_name,
        in_channels=described["channels"],
        num_classes=described["num_classes"],
        image_size=described["size"],
        options=model_options,
        code_folder=code,
    )
    model.load_state_dict(state["model"])
    exported = ExportedModel(model, config, {})
    # A user's data without test/: no test score, said so.
    test_loss, test_accuracy, test_images = evaluate_chunks(exported, held.test_chunks())
    example = held.examples()
    metrics = {
        "trial_id": config["trial_id"],
        "epoch": config["epoch"],
        "val_accuracy": float(val_metrics["val_accuracy"]),
        "val_loss": float(val_metrics["val_loss"]),
        "train_loss": float(val_metrics["train_loss"]),
        **{o.metric: float(val_metrics[o.metric]) for o in sweep.objectives},  # params, latency_ms
        "test_accuracy": test_accuracy,
        "test_loss": test_loss,
        "test_images": test_images,
        "checkpoint": _where(checkpoint),
    }
    config["format"] = format
    write_package(to, model, config, metrics, format=format, example=example, overwrite=overwrite, code=code)
    exported.metrics = metrics
    exported.example = example
    return exported


def objectives_record(sweep: Any, val_metrics: dict[str, Any]) -> dict[str, Any]:
    """config.yaml's ``metric``: the sweep's metric, and with several objectives every one
    and the rule that took the exported point from the Pareto front."""
    record: dict[str, Any] = {"name": sweep.metric, "mode": sweep.mode}
    if sweep.objectives:
        record["objectives"] = [{"name": o.metric, "mode": o.mode} for o in sweep.objectives]
        record["selected_by"] = val_metrics.get("selected_by", "")
    return record


def code_folder(sweep: Any, folder: Any) -> Path | None:
    """The user's code a model.factory is imported from: the sweep's kept copy (code/)."""
    if sweep.model.name != "factory":
        return None
    return folder.code if folder.code.is_dir() else Path(sweep.code_dir)


def evaluate(exported: ExportedModel, images: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on a labelled split."""
    loss, accuracy, _ = evaluate_chunks(exported, [(images, labels)])
    assert loss is not None and accuracy is not None, "evaluate() needs at least one image"
    return loss, accuracy


@torch.no_grad()
def evaluate_chunks(
    exported: ExportedModel, chunks: Iterable[tuple[np.ndarray, np.ndarray]]
) -> tuple[float | None, float | None, int]:
    """Mean cross-entropy, accuracy and image count over (images, labels) chunks (a split
    too large to hold is read a chunk at a time); None, None, 0 for no images."""
    data = exported.config["data"]
    exported.model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for images, labels in chunks:
        labels_t = torch.as_tensor(labels)
        for begin in range(0, len(labels), 1000):
            x = normalise(
                torch.from_numpy(np.array(images[begin : begin + 1000])), tuple(data["mean"]), tuple(data["std"])
            )
            logits = exported.model(x)
            y = labels_t[begin : begin + 1000]
            total_loss += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
        count += len(labels)
    if count == 0:
        return None, None, 0
    return total_loss / count, correct / count, count


def _where(checkpoint: Any) -> str:
    """The checkpoint's path, as a URI where it is not on a local disk."""
    from tuner.folder.remote import located

    return located(checkpoint.filesystem, checkpoint.path)


def _load_checkpoint(folder: str) -> dict[str, Any]:
    """A trial's checkpoint; a truncated or foreign file is one TunerError naming it."""
    from tuner.trial.session import CHECKPOINT_FILE, load_state

    try:
        state = load_state(folder)
        state["model"].items()
        return state
    except (OSError, EOFError, KeyError, TypeError, AttributeError, RuntimeError, pickle.UnpicklingError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise TunerError(
            f"{Path(folder) / CHECKPOINT_FILE}: not a readable checkpoint ({type(error).__name__}: {reason})"
        ) from None


def is_export(folder: Path) -> bool:
    """Whether ``folder`` is a package tuner wrote: its config.yaml and metrics.json, and
    nothing but tuner's file names unless the user added some."""
    try:
        config = yaml.safe_load((folder / CONFIG_FILE).read_text())
        json.loads((folder / METRICS_FILE).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if not isinstance(config, dict) or not {"sweep", "trial_id"} <= set(config):
        return False
    return {"model", "data"} <= set(config) or "trainable" in config  # a user's function's export: no model


def check_destination(folder: Path, *, overwrite: bool) -> None:
    """Refuse a destination that is not new, not empty and not a previous export (or a
    previous export without ``overwrite``): an export never deletes what it did not write."""
    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise TunerError(f"--to {folder}: exists and is not a folder; give a new folder or a previous export")
    try:
        entries = sorted(p.name for p in folder.iterdir())
    except OSError as error:
        raise TunerError(f"--to {folder}: cannot be read ({error.strerror})") from None
    if not entries:
        return
    if not is_export(folder):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise TunerError(
            f"--to {folder}: exists and is not a tuner export ({len(entries)} entries: {shown}); "
            "nothing was written; give a new or empty folder"
        )
    if not overwrite:
        raise TunerError(f"--to {folder}: holds a previous export; add --overwrite to replace it")


def write_package(
    folder: Path,
    model: torch.nn.Module,
    config: dict[str, Any],
    metrics: dict[str, Any],
    *,
    format: str = "state_dict",
    example: np.ndarray | None = None,
    overwrite: bool = False,
    code: Path | None = None,
    checkpoint: Path | None = None,
) -> None:
    """Write the package into a staging folder beside ``folder``, then move it in.
    ``code``: the user's code folder, carried as ``code/``; ``checkpoint``: a user's
    checkpoint folder, carried as ``checkpoint/`` (with ``model`` None: no weights file).

    Only tuner's own file names are ever replaced or removed; a previous export is
    replaced only with ``overwrite``; anything else in ``folder`` stays.
    """
    from tuner.folder.store import storage_error, umask

    folder = Path(folder)
    check_destination(folder, overwrite=overwrite)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        # Inside an existing folder (it may be a mount point: a rename across filesystems fails).
        where = folder if folder.is_dir() else folder.parent
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=where))
        os.chmod(staging, 0o777 & ~umask())  # as mkdir would; mkdtemp gives 0700
    except OSError as error:
        raise storage_error(folder, error) from None
    try:
        _write_files(staging, model, config, metrics, format=format, example=example)
        for source, name in ((code, CODE_FOLDER), (checkpoint, CHECKPOINT_FOLDER)):
            if source is not None:
                shutil.copytree(source, staging / name, ignore=shutil.ignore_patterns("__pycache__"))
        _move_in(staging, folder)
    except OSError as error:
        raise storage_error(folder, error) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # our own temporary folder


def _write_files(staging: Path, model, config, metrics, *, format: str, example) -> None:
    # Serialised in memory first: torch reports a failed file write as a RuntimeError,
    # a plain write reports a full disk as the OSError it is.
    weights = io.BytesIO()
    if model is None:  # a user's checkpoint only
        pass
    elif format == "torchscript":
        model.eval()
        data = config["data"]
        x = normalise(torch.from_numpy(np.array(example)), tuple(data["mean"]), tuple(data["std"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.jit.save(torch.jit.trace(model, x), weights)
    else:
        torch.save(model.state_dict(), weights)
    if model is not None:
        (staging / (SCRIPT_FILE if format == "torchscript" else MODEL_FILE)).write_bytes(weights.getvalue())
    (staging / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
    (staging / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")


def _move_in(staging: Path, folder: Path) -> None:
    """New folder: one rename. Existing one: tuner's files replaced one by one, the
    weights first and metrics.json last, and a stale weights file of the other format
    removed; the user's own files are left alone."""
    if not folder.exists():
        staging.rename(folder)
        return
    ours = (MODEL_FILE, SCRIPT_FILE, CODE_FOLDER, CHECKPOINT_FOLDER, CONFIG_FILE, METRICS_FILE)
    written = [name for name in ours if (staging / name).exists()]
    for name in written:
        if (staging / name).is_dir():  # a folder of ours: the old one out of the way first
            _remove(folder / name)
        os.replace(staging / name, folder / name)
    for name in {MODEL_FILE, SCRIPT_FILE, CODE_FOLDER, CHECKPOINT_FOLDER} - set(written):
        _remove(folder / name)


def _remove(path: Path) -> None:
    """One of tuner's own files or folders in an export (only called with those names)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _plain(value: Any) -> Any:
    """numpy scalars (BOHB, HyperOpt) to Python values, for YAML and JSON."""
    return value.item() if isinstance(value, np.generic) else value
