"""A /predict request's body as the model's input, or a one-line reason it is not one.

Pure: numpy and Pillow, no Ray, no web framework, so every bad body is tested without a
server. The body is read by the caller up to ``Limits.max_bytes``; this module decodes:

- ``image/png``, ``image/jpeg``, any ``image/*``, ``application/octet-stream`` or no
  content type: the body is one encoded image;
- ``multipart/form-data``: every file part is one image (a form with many files is a batch);
- ``application/json``: pixel values 0-255, either a bare array or ``{"images": array}``
  (``"instances"`` too, as TensorFlow Serving and MLflow name it), shaped ``[H, W]`` (one
  grey image), ``[C, H, W]`` (one image, C > 1), ``[N, H, W]`` (grey images; a one-channel
  model only) or ``[N, C, H, W]``.

An image must have the model's channels and size unless the export says its training
images were adapted (an image folder or Parquet: tuner converted and resized them then,
so it does so here too); a built-in data set's model gets exactly what it was trained on.
"""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

ADAPTED_DATASETS = ("image_folder", "parquet")  # training images tuner converted and resized
MAX_BYTES = 8 * 1024 * 1024
MAX_IMAGES = 256
MAX_PIXELS = 4096 * 4096  # a decoded image's limit (a small PNG can claim to be huge)
IMAGE_TYPES = ("image/", "application/octet-stream")


class BadRequest(Exception):
    """A request the service refuses: an HTTP status (4xx) and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    channels: int
    size: int
    adapt: bool = False  # convert channels and resize, as training did
    max_bytes: int = MAX_BYTES
    max_images: int = MAX_IMAGES

    @classmethod
    def of(cls, data: dict[str, Any], **limits: int) -> Limits:
        """From an export's ``config.yaml`` data section."""
        adapt = data.get("dataset") in ADAPTED_DATASETS
        return cls(int(data["channels"]), int(data["size"]), adapt, **limits)

    @property
    def shape(self) -> str:
        return f"{self.channels}x{self.size}x{self.size}"


def decode(body: bytes, content_type: str | None, limits: Limits) -> np.ndarray:
    """uint8 ``[N, C, H, W]`` with N >= 1, or BadRequest."""
    if not body:
        raise BadRequest(400, "empty body: send an image (PNG or JPEG), a multipart form of images, or JSON pixels")
    if len(body) > limits.max_bytes:
        raise BadRequest(413, f"body of {len(body)} bytes; the limit is {limits.max_bytes}")
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == "application/json" or (not kind and body[:1] in (b"[", b"{")):
        images = _from_json(body, limits)
    elif kind == "multipart/form-data":
        images = _from_multipart(body, content_type or "", limits)
    elif not kind or kind.startswith(IMAGE_TYPES):
        images = _image(body, limits, "the body")[None]
    else:
        raise BadRequest(
            415,
            f"content type {kind!r}: send image/png, image/jpeg, multipart/form-data or application/json",
        )
    if len(images) > limits.max_images:
        raise BadRequest(413, f"{len(images)} images in one request; the limit is {limits.max_images}")
    return images


def _from_json(body: bytes, limits: Limits) -> np.ndarray:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest(400, f"body is not JSON ({str(error).splitlines()[0]})") from None
    if isinstance(value, dict):
        keys = [key for key in ("images", "instances") if key in value]
        if not keys:
            raise BadRequest(422, f'JSON object without "images": got keys {sorted(value)[:5]}')
        value = value[keys[0]]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy's ragged-array warning is an error here
            array = np.asarray(value)
    except (ValueError, TypeError, np.exceptions.VisibleDeprecationWarning):
        raise BadRequest(
            422, "pixel values are a ragged array: every row and image must have the same length"
        ) from None
    if array.dtype == object or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise BadRequest(422, f"pixel values must be numbers 0-255, got {array.dtype.name} values")
    if array.size and (np.isnan(array).any() if array.dtype.kind == "f" else False):
        raise BadRequest(422, "pixel values must be numbers 0-255, got NaN")
    if array.size and (array.min() < 0 or array.max() > 255 or (array.dtype.kind == "f" and (array % 1).any())):
        raise BadRequest(422, "pixel values must be whole numbers 0-255 (raw pixels, not normalised)")
    given = list(array.shape)
    if array.ndim == 2:
        array = array[None, None]
    elif array.ndim == 3:
        array = array[:, None] if limits.channels == 1 else array[None]
    expected = (limits.channels, limits.size, limits.size)
    if array.ndim != 4 or tuple(array.shape[1:]) != expected or array.shape[0] == 0:
        one = f"[{limits.size}, {limits.size}]" if limits.channels == 1 else f"[{', '.join(map(str, expected))}]"
        raise BadRequest(
            422, f"JSON pixels of shape {given}; the model takes {one} or [N, {', '.join(map(str, expected))}]"
        )
    return array.astype(np.uint8)


def _from_multipart(body: bytes, content_type: str, limits: Limits) -> np.ndarray:
    if "boundary=" not in content_type:
        raise BadRequest(400, "multipart/form-data without a boundary in its Content-Type")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    files = [part for part in message.iter_parts() if part.get_content_disposition() == "form-data"]
    if not message.is_multipart() or not files:
        raise BadRequest(400, "multipart/form-data body with no parts: add each image as a file field")
    if len(files) > limits.max_images:
        raise BadRequest(413, f"{len(files)} images in one request; the limit is {limits.max_images}")
    images = []
    for index, part in enumerate(files):
        name = part.get_filename() or part.get_param("name", header="content-disposition") or f"part {index + 1}"
        content = part.get_payload(decode=True) or b""
        if not content:
            raise BadRequest(400, f"form field {name!r} is empty")
        images.append(_image(content, limits, f"form field {name!r}"))
    return np.stack(images)


def _image(content: bytes, limits: Limits, where: str) -> np.ndarray:
    """One encoded image as uint8 ``[C, H, W]``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow warns above ~89 M pixels (and refuses twice that): the limit below is smaller
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(content)) as image:
                if image.width * image.height > MAX_PIXELS:
                    raise BadRequest(
                        413, f"{where}: a {image.width}x{image.height} image; the limit is {MAX_PIXELS} pixels"
                    )
                image.load()
                return _pixels(image, limits, where)
    except BadRequest:
        raise
    except UnidentifiedImageError:
        raise BadRequest(400, f"{where} is not an image Pillow can read (PNG, JPEG, ...)") from None
    except Image.DecompressionBombError:
        raise BadRequest(413, f"{where}: an image of more than {MAX_PIXELS} pixels") from None
    except (OSError, SyntaxError, ValueError) as error:  # a truncated or corrupt file
        raise BadRequest(
            400, f"{where}: a damaged image ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
        ) from None


GREY_MODES = ("L", "1")


def _pixels(image: Any, limits: Limits, where: str) -> np.ndarray:
    mode = "L" if limits.channels == 1 else "RGB"
    fits = (image.mode in GREY_MODES) if limits.channels == 1 else image.mode == "RGB"
    if not fits and not limits.adapt:
        bands = len(image.getbands())
        raise BadRequest(
            422,
            f"{where}: a {image.mode} image ({bands} channel{'s' if bands > 1 else ''}); "
            f"the model takes {limits.channels}-channel images ({'greyscale' if limits.channels == 1 else 'RGB'})",
        )
    if image.size != (limits.size, limits.size) and not limits.adapt:
        raise BadRequest(
            422, f"{where}: a {image.width}x{image.height} image; the model takes {limits.size}x{limits.size}"
        )
    image = image.convert(mode)
    if image.size != (limits.size, limits.size):
        image = image.resize((limits.size, limits.size))
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
