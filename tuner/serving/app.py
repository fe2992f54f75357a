"""The service: a Ray Serve deployment behind a FastAPI app (its OpenAPI page at /docs).

``POST /predict`` decodes the body (tuner/serving/inputs.py), hands each image to a
``@serve.batch`` method that gathers the images of concurrent requests into one batch
for the model, and answers each image's class, class name and probabilities. A bad body
is a 4xx with ``{"error": reason}``; the replica goes on serving. ``GET /healthz`` and
``GET /model`` (what the export recorded: trial, epoch, metrics, hyperparameters).
"""

import asyncio
import os
from typing import Any

import numpy as np
import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from ray import serve

from tuner.serving.inputs import MAX_BYTES, MAX_IMAGES, BadRequest, Limits, decode
from tuner.serving.model import Bundle, Served

BATCH_WAIT_S = 0.005  # how long a batch waits for more images once it has one
DRAIN_FACTOR = 4  # a refused body up to this many times the limit is read to its end first


class Prediction(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    class_: int = Field(alias="class", description="the class index")
    name: str = Field(description="the class's name (the folder name for an image folder)")
    probability: float = Field(description="the class's probability")
    probabilities: list[float] = Field(description="every class's probability, by index")


class Predictions(BaseModel):
    predictions: list[Prediction] = Field(description="one per image, in the order sent")
    trial_id: str | None = Field(None, description="the trial whose model answered")


class Problem(BaseModel):
    error: str = Field(description="why the request was refused, in one line")


PIXELS = {
    "type": "array",
    "description": "pixel values 0-255: [H, W], [C, H, W], [N, H, W] (one-channel models) or [N, C, H, W]",
    "items": {},
}
REQUEST_BODY = {
    "required": True,
    "description": (
        "One image as PNG/JPEG bytes, several as a multipart form (one file field each), or pixel values "
        'as JSON: a bare array or {"images": array}. Images must have the model\'s channels and size '
        "(GET /model: input) unless the model was trained on an image folder or Parquet, whose images "
        f"tuner resizes. Limits: {MAX_BYTES >> 20} MiB per request, {MAX_IMAGES} images (as started)."
    ),
    "content": {
        "image/png": {"schema": {"type": "string", "format": "binary"}},
        "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {"images": {"type": "array", "items": {"type": "string", "format": "binary"}}},
            }
        },
        "application/json": {
            "schema": {"oneOf": [PIXELS, {"type": "object", "properties": {"images": PIXELS}, "required": ["images"]}]}
        },
    },
}
REFUSALS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "an empty body, bytes that are no image, JSON that does not parse"},
    413: {"model": Problem, "description": "a body or an image over the limits, too many images"},
    415: {"model": Problem, "description": "a content type the service does not read"},
    422: {"model": Problem, "description": "images of the wrong size or channels, pixels of the wrong shape"},
}

api = FastAPI(
    title="tuner model service",
    summary="A sweep's best model, served by Ray Serve: POST images to /predict.",
    version="1",
)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, or 413 once it is known to exceed ``limit``. The rest of a body a little
    over is read and dropped first (up to DRAIN_FACTOR x the limit), so that the client,
    still sending, gets the 413 instead of a reset connection."""
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    chunks, size = [], 0
    stream = request.stream()  # one iterator: read on after a break, never started twice
    if declared is None or declared <= limit:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                break
            chunks.append(chunk)
        else:
            return b"".join(chunks)
    if (declared or size) <= DRAIN_FACTOR * limit:
        async for chunk in stream:
            size += len(chunk)
            if size > DRAIN_FACTOR * limit:
                break
    said = f"body of {declared} bytes" if declared is not None else f"body of more than {limit} bytes"
    raise BadRequest(413, f"{said}; the limit is {limit}")


# Module-level helpers above: Serve pickles the ingress class with the globals it sees when decorated.
@serve.deployment(name="model", max_ongoing_requests=64, health_check_period_s=2)
@serve.ingress(api)
class ModelService:
    def __init__(self, bundle: Bundle, max_batch_size: int, limits: dict[str, int]) -> None:
        self.served = Served.from_bundle(bundle)
        self.info = bundle.info
        self.limits = Limits.of(self.served.data, **limits)
        self.classify.set_max_batch_size(max_batch_size)
        self.largest_batch = 0  # the most images one model call took (GET /healthz)
        self.node = ray.get_runtime_context().get_node_id()

    def __del__(self) -> None:
        served = getattr(self, "served", None)
        if served is not None:
            served.close()

    @api.get("/healthz", summary="whether this replica answers; its process, Ray node, torch threads, largest batch")
    async def healthz(self) -> dict[str, Any]:
        import torch

        said = {"status": "ok", "pid": os.getpid(), "node": self.node, "threads": torch.get_num_threads()}
        return {**said, "largest_batch": self.largest_batch}

    @api.get("/model", summary="what the export recorded: sweep, trial, epoch, metrics, hyperparameters, input")
    async def model(self) -> dict[str, Any]:
        limits = self.limits
        return {
            **self.info,
            "input": {
                "channels": limits.channels,
                "size": limits.size,
                "resized": limits.adapt,
                "max_bytes": limits.max_bytes,
                "max_images": limits.max_images,
            },
            "classes": self.served.classes,
        }

    @api.post(
        "/predict",
        summary="classes and probabilities of one or many images",
        response_model=Predictions,
        responses=REFUSALS,
        openapi_extra={"requestBody": REQUEST_BODY},
    )
    async def predict(self, request: Request) -> JSONResponse:
        try:
            body = await _read_body(request, self.limits.max_bytes)
            images = decode(body, request.headers.get("content-type"), self.limits)
        except BadRequest as refused:
            return JSONResponse({"error": refused.reason}, status_code=refused.status)
        rows = await asyncio.gather(*(self.classify(image) for image in images))
        names = self.served.classes
        predictions = []
        for row in rows:
            best = int(np.argmax(row))
            predictions.append(
                {
                    "class": best,
                    "name": names[best] if best < len(names) else str(best),
                    "probability": float(row[best]),
                    "probabilities": [round(float(p), 6) for p in row],
                }
            )
        return JSONResponse({"predictions": predictions, "trial_id": self.info.get("trial_id")})

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=BATCH_WAIT_S)
    async def classify(self, images: list[np.ndarray]) -> list[np.ndarray]:
        """One model call for the images of every request waiting (each is [C, H, W])."""
        self.largest_batch = max(self.largest_batch, len(images))
        # In a thread: the event loop keeps reading requests (and health checks) meanwhile.
        probabilities = await asyncio.to_thread(self.served.probabilities, np.stack(images))
        return list(probabilities)
