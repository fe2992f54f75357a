"""The model tuner logs on a sweep's parent run and registers: served_model.py with its files and signature."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The model tuner registers: MLflow loads this file by itself ("models from code"), so it
# is named by path, never imported here (importing it sets MLflow's model).
SERVED_MODEL_FILE = Path(__file__).with_name("served_model.py")


@dataclass(frozen=True)
class ServedFiles:
    """The registered model's files, made where torch is (the driver: ``served_files``), for
    the process that logs them (the sweep's MLflow writer, which has no model to trace).
    ``artifacts`` is empty for a best trial with nothing MLflow could serve (a user's
    function without a model factory, or no images to trace it on)."""

    artifacts: dict[str, str]
    channels: int = 0
    size: int = 0
    classes: int = 0
    example: np.ndarray | None = None  # uint8 ``[N, C, H, W]``: MLflow's input example

    def signature(self) -> Any:
        """uint8 ``[N, C, H, W]`` in; class, label, probability and one column per class out."""
        from mlflow.models import ModelSignature
        from mlflow.types import ColSpec, Schema, TensorSpec

        return ModelSignature(
            inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, self.channels, self.size, self.size))]),
            outputs=Schema(
                [
                    ColSpec("long", "class"),
                    ColSpec("string", "label"),
                    ColSpec("double", "probability"),
                    *[ColSpec("double", f"p_{k}") for k in range(self.classes)],
                ]
            ),
        )


def servable(exported: Any) -> bool:
    """Whether ``exported`` (an ExportedModel, or its ServedFiles) holds a model MLflow can serve."""
    if isinstance(exported, ServedFiles):
        return bool(exported.artifacts)
    return exported.model is not None and exported.example is not None


def log_served_model(uri: str, run_id: str, exported: Any) -> Any:
    """``exported`` (an ExportedModel, or the ServedFiles made of one) logged on the run as
    MLflow's pyfunc model (``SERVED_MODEL_FILE``); MLflow's ModelInfo."""
    import mlflow

    with tempfile.TemporaryDirectory() as folder, fluent_uri(uri), mlflow.start_run(run_id=run_id):
        files = exported if isinstance(exported, ServedFiles) else served_files(exported, Path(folder))
        return mlflow.pyfunc.log_model(
            name="model",
            python_model=str(SERVED_MODEL_FILE),
            artifacts=files.artifacts,
            signature=files.signature(),
            input_example=np.array(files.example),
            # Stated, not inferred: inference imports the model in a subprocess (~8 s).
            pip_requirements=_model_requirements(),
        )


def scan_installed_packages() -> None:
    """Make now the list of installed packages that ``log_model`` checks the stated
    requirements against (0.3-0.6 s, kept for the process), so that the export does not wait
    for it: called on the MLflow writer's thread as a sweep opens its records."""
    with contextlib.suppress(Exception):  # MLflow's own, not its API: a later MLflow scans at its time
        from mlflow.utils import requirements_utils

        requirements_utils._init_packages_to_modules_map()


def register(uri: str, model_uri: str, name: str) -> Any:
    """A new version of the registered model ``name``: the model logged at ``model_uri``."""
    import mlflow

    # MLflow prints "Successfully registered model ..." to stderr itself; the sweep's
    # summary says which version it made.
    with fluent_uri(uri), contextlib.redirect_stderr(io.StringIO()):
        return mlflow.register_model(model_uri, name)


def _model_requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{package}=={version(package)}" for package in ("torch", "numpy", "pandas", "mlflow")]


def served_model_files(exported: Any, folder: Path) -> tuple[dict[str, str], Any]:
    """The registered model's artifacts (TorchScript network, settings.json) and signature."""
    files = served_files(exported, folder)
    return files.artifacts, files.signature()


def served_files(exported: Any, folder: Path) -> ServedFiles:
    """The registered model's artifacts written into ``folder``: the TorchScript network and
    settings.json (no MLflow imported: the driver makes them, its sweep's writer logs them)."""
    if not servable(exported):
        return ServedFiles({})
    import torch

    from tuner.data.datasets import CLASS_NAMES

    data = exported.config["data"]
    network = folder / "network.ts"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracing notes, torch.jit's deprecation notice
        # check_trace traces the model a second time to compare, and only warns (0.9 of the
        # 1.0 s a default CNN took); those warnings are ignored here anyway.
        traced = torch.jit.trace(exported.model.eval(), torch.from_numpy(exported.example_input()), check_trace=False)
        torch.jit.save(traced, str(network))
    classes = list(data.get("classes") or CLASS_NAMES[data["dataset"]])  # exports before classes were recorded
    settings = folder / "settings.json"
    keys = ("mean", "std", "channels", "size")
    # dataset: whether training images were adapted (resized) by tuner, which a service may then do too
    recorded = {**{k: data[k] for k in keys}, "dataset": data.get("dataset"), "classes": classes}
    settings.write_text(json.dumps(recorded, indent=2))
    artifacts = {"network": str(network), "settings": str(settings)}
    return ServedFiles(artifacts, data["channels"], data["size"], len(classes), np.array(exported.example))


@contextlib.contextmanager
def fluent_uri(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API at ``uri`` for a moment.

    ``mlflow.set_tracking_uri`` also exports MLFLOW_TRACKING_URI, which would send every
    later sweep of this process (and its child processes) to this sweep's store.
    """
    import mlflow

    previous_uri, previous_env = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous_uri)
        if previous_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous_env
