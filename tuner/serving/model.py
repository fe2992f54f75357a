"""What a service serves: a sweep's exported model (a run folder's ``best/`` or an export
folder) or a model registered in MLflow (``models:/name/version``).

The driver reads it once (``bundle``): it loads the model there, so a folder that is not
an export or a model that does not load is one line before Ray starts, and carries its
files as bytes, since a replica may run on a node that does not have the folder. Each
replica writes the bytes to a temporary folder of its own and loads them (``Served``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import TunerError

MODELS_URI = "models:/"
LEFT_OUT = ("checkpoint",)  # a user's training function's own checkpoint: not what is served
MAX_BUNDLE_BYTES = 1 << 30  # what a replica is sent; a bigger model is not what this serves


@dataclass
class Bundle:
    """A model's files and what ``GET /model`` says of it; picklable, sent to every replica."""

    kind: str  # "export" or "mlflow"
    source: str  # as the user named it
    files: dict[str, bytes] = field(repr=False)
    info: dict[str, Any]  # sweep, trial, epoch, metrics, hyperparameters, model ...
    data: dict[str, Any]  # channels, size, dataset: what inputs.Limits reads
    classes: list[str]


def bundle(source: str, *, tracking_uri: str | None = None) -> Bundle:
    """The model at ``source``, loaded here once to check it; TunerError names what is wrong."""
    if source.startswith(MODELS_URI):
        return _registered(source, tracking_uri)
    folder = _export_folder(Path(source))
    served = Served("export", folder)  # loads it: the same code a replica runs
    config, metrics = served.config, served.metrics
    info = {
        "source": str(folder),
        "sweep": config.get("sweep"),
        "trial_id": metrics.get("trial_id", config.get("trial_id")),
        "epoch": metrics.get("epoch", config.get("epoch")),
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k != "epoch"},
        "hyperparameters": config.get("hyperparameters", {}),
        "model": config.get("model", {}),
        "metric": config.get("metric", {}),
    }
    return Bundle("export", source, _read_files(folder), info, served.data, served.classes)


def _export_folder(path: Path) -> Path:
    from tuner.results.export import is_export

    if not path.exists():
        raise TunerError(
            f"{path}: no such folder; give a sweep's folder (runs/NAME), an export or models:/NAME/VERSION"
        )
    if is_export(path):
        return path
    if (path / "best").is_dir() and is_export(path / "best"):
        return path / "best"
    if (path / "sweep.yaml").is_file():
        raise TunerError(
            f"{path}: the sweep has no exported model yet (no best/); resume it or run: tuner export {path}"
        )
    raise TunerError(f"{path}: not a sweep folder or an exported model (no config.yaml and metrics.json of tuner's)")


def _read_files(folder: Path) -> dict[str, bytes]:
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or relative.parts[0] in LEFT_OUT or "__pycache__" in relative.parts:
            continue
        files[relative.as_posix()] = content = path.read_bytes()
        total += len(content)
        if total > MAX_BUNDLE_BYTES:
            raise TunerError(f"{folder}: more than {MAX_BUNDLE_BYTES >> 20} MiB of files; not a model to serve")
    return files


def _registered(uri: str, tracking_uri: str | None) -> Bundle:
    """A registered model: its files from MLflow's store, its version's run for the record."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    name_version = uri[len(MODELS_URI) :].split("/")
    if len(name_version) != 2 or not all(name_version):
        raise TunerError(f"{uri}: give a registered model as models:/NAME/VERSION (or models:/NAME/latest)")
    name, version = name_version
    client = MlflowClient(tracking_uri)
    with tempfile.TemporaryDirectory(prefix="tuner-serve-") as where:
        try:
            if version == "latest":
                versions = client.search_model_versions(f"name = '{name}'")
                if not versions:
                    raise TunerError(f"{uri}: no version of model {name!r} in {client.tracking_uri}")
                version = str(max(int(v.version) for v in versions))
            found = client.get_model_version(name, version)
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=f"{MODELS_URI}{name}/{version}", dst_path=where, tracking_uri=tracking_uri
            )
        except MlflowException as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise TunerError(f"{uri}: not found in the MLflow store {client.tracking_uri} ({reason})") from None
        folder = Path(local)
        served = Served("mlflow", folder)
        files = _read_files(folder)
    run = client.get_run(found.run_id) if found.run_id else None
    info = {
        "source": f"{MODELS_URI}{name}/{version}",
        "registered_model": name,
        "version": version,
        "sweep": found.tags.get("sweep"),
        "trial_id": found.tags.get("trial_id"),
        "run_id": found.run_id,
        "metrics": dict(run.data.metrics) if run else {},
    }
    return Bundle("mlflow", uri, files, info, served.data, served.classes)


class Served:
    """A model loaded in this process: ``probabilities`` of uint8 ``[N, C, H, W]`` images."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.config: dict[str, Any] = {}
        self.metrics: dict[str, Any] = {}
        if kind == "export":
            from tuner.data.datasets import CLASS_NAMES
            from tuner.results.export import load_best

            exported = load_best(folder)
            self.config, self.metrics = exported.config, exported.metrics
            self._model = exported
            data = exported.config["data"]
            names = data.get("classes") or CLASS_NAMES.get(data["dataset"], ())
        else:
            import mlflow

            settings = _mlflow_settings(folder)
            try:
                self._model = mlflow.pyfunc.load_model(str(folder))
            except Exception as error:  # MLflow raises many kinds for a model it cannot load
                reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise TunerError(f"{folder}: MLflow cannot load this model ({reason})") from None
            data = settings
            names = settings.get("classes", ())
        self.data = {"channels": int(data["channels"]), "size": int(data["size"]), "dataset": data.get("dataset")}
        self.num_classes = int(data.get("num_classes") or len(names))
        self.classes = [str(n) for n in names] if names else [str(k) for k in range(self.num_classes)]

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> Served:
        """In a replica: the bundle's files in a folder of its own (removed when it is dropped)."""
        where = Path(tempfile.mkdtemp(prefix="tuner-serve-"))
        for name, content in bundle.files.items():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        try:
            served = cls(bundle.kind, where)
        except Exception:
            shutil.rmtree(where, ignore_errors=True)
            raise
        served._folder = where
        return served

    def close(self) -> None:
        folder = getattr(self, "_folder", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """float32 ``[N, K]``: each image's probability of each class."""
        if self.kind == "export":
            return self._model.probabilities(images)
        frame = self._model.predict(np.ascontiguousarray(images))
        columns = [f"p_{k}" for k in range(self.num_classes)]
        return frame[columns].to_numpy(dtype=np.float32)


def _mlflow_settings(folder: Path) -> dict[str, Any]:
    """The registered model's settings.json (tuner/tracking/served_model.py): shape, classes."""
    found = sorted(folder.rglob("settings.json"))
    if not found:
        raise TunerError(f"{folder}: not a model tuner registered (no settings.json among its artifacts)")
    try:
        return json.loads(found[0].read_text())
    except (OSError, ValueError) as error:
        raise TunerError(f"{found[0]}: unreadable ({error})") from None


def default_tracking_uri() -> str | None:
    """$MLFLOW_TRACKING_URI, else the sqlite file a sweep with the defaults writes (runs/mlflow.db)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    default = Path("runs") / "mlflow.db"
    return f"sqlite:///{default.resolve()}" if default.is_file() else None
