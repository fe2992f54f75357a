"""The model tuner registers in MLflow: images as users have them in, classes out.

MLflow loads this file by itself (its "models from code"), with two artifacts beside
it: the network as TorchScript and ``settings.json`` (mean, std, input shape, class
names). Calling the model needs torch, numpy, pandas and mlflow, not tuner:

    model = mlflow.pyfunc.load_model("models:/mnist_cnn/1")
    model.predict(images)  # uint8 [N, C, H, W] or [N, H, W], 0-255

returns a DataFrame: ``class`` (the index), ``label`` (its name), ``probability``, and
``p_0`` ... ``p_<K-1>``, one column per class. The normalisation the network was trained
with happens inside, so raw pixels are what it takes; other dtypes are refused.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import torch

BATCH = 1024


class ImageClassifier(mlflow.pyfunc.PythonModel):
    def load_context(self, context: Any) -> None:
        settings = json.loads(Path(context.artifacts["settings"]).read_text())
        with warnings.catch_warnings():  # torch.jit's deprecation notice: the model is TorchScript
            warnings.simplefilter("ignore", FutureWarning)
            self.network = torch.jit.load(context.artifacts["network"], map_location="cpu").eval()
        self.mean = torch.tensor(settings["mean"], dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(settings["std"], dtype=torch.float32).view(1, -1, 1, 1)
        self.channels, self.size = int(settings["channels"]), int(settings["size"])
        self.labels = [str(name) for name in settings["classes"]]

    # No type hints: the logged signature states the input (one uint8 tensor), and MLflow
    # would read hints as a schema of records. (MLflow notes their absence once per load.)
    # The hint tells MLflow there is no schema to infer from it (the logged signature says
    # uint8 [N, C, H, W]); without one MLflow warns at every load.
    def predict(self, context, model_input: np.ndarray, params: dict[str, Any] | None = None):
        images = np.asarray(model_input)
        if images.dtype != np.uint8:
            raise ValueError(f"expects uint8 images (0-255), got {images.dtype}")
        if images.ndim == 3:
            images = images[:, None]
        expected = (self.channels, self.size, self.size)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"expects images [N, {', '.join(map(str, expected))}] or [N, H, W], got {images.shape}")
        chunks = []
        with torch.no_grad():
            for begin in range(0, len(images), BATCH):
                # As float32 in a fresh array: the caller's may be read-only (PyTorch warns of those).
                x = torch.from_numpy(images[begin : begin + BATCH].astype(np.float32))
                x = (x / 255.0 - self.mean) / self.std
                chunks.append(self.network(x).softmax(dim=1))
        probabilities = (torch.cat(chunks) if chunks else torch.zeros(0, len(self.labels))).numpy()
        classes = probabilities.argmax(axis=1)
        frame = pd.DataFrame(
            {
                "class": classes.astype(np.int64),
                "label": [self.labels[c] for c in classes],
                "probability": probabilities.max(axis=1, initial=0.0).astype(np.float64),
            }
        )
        for k in range(probabilities.shape[1]):
            frame[f"p_{k}"] = probabilities[:, k].astype(np.float64)
        return frame


mlflow.models.set_model(ImageClassifier())
