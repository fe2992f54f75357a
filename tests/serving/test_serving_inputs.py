"""What ``POST /predict`` reads: every accepted body as the model's input, and every bad
one as a 4xx with a one-line reason (no server: tuner/serving/inputs.py is pure)."""

from __future__ import annotations

import io
import json
import uuid

import numpy as np
import pytest
from PIL import Image

from tuner.serving.inputs import BadRequest, Limits, decode

GREY = Limits(channels=1, size=28, max_bytes=200_000, max_images=8)
RGB = Limits(channels=3, size=32, max_bytes=200_000, max_images=8)
FOLDER = Limits(channels=1, size=28, adapt=True, max_bytes=200_000, max_images=8)


def encoded(array: np.ndarray, format: str = "PNG", mode: str | None = None) -> bytes:
    out = io.BytesIO()
    image = Image.fromarray(array)
    (image.convert(mode) if mode else image).save(out, format=format)
    return out.getvalue()


def multipart(files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = b""
    for name, content in files:
        body += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="images"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + content
            + b"\r\n"
        )
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


DIGIT = (np.arange(28 * 28) % 256).astype(np.uint8).reshape(28, 28)
# smooth colours: JPEG keeps them (noise it would not)
COLOUR = np.stack([*np.meshgrid(np.arange(32) * 8, np.arange(32) * 8, indexing="ij"), np.full((32, 32), 128)], -1)
COLOUR = COLOUR.astype(np.uint8)


def test_a_png_is_one_image_with_its_pixels():
    for content_type in ("image/png", "application/octet-stream", None):
        images = decode(encoded(DIGIT), content_type, GREY)
        assert images.shape == (1, 1, 28, 28) and images.dtype == np.uint8
        assert np.array_equal(images[0, 0], DIGIT)


def test_an_rgb_jpeg_for_an_rgb_model():
    images = decode(encoded(COLOUR, "JPEG"), "image/jpeg", RGB)
    assert images.shape == (1, 3, 32, 32)
    assert np.abs(images[0].transpose(1, 2, 0).astype(int) - COLOUR).mean() < 8  # JPEG is lossy


def test_a_multipart_form_is_a_batch_in_its_order():
    body, content_type = multipart([("a.png", encoded(DIGIT)), ("b.png", encoded(255 - DIGIT))])
    images = decode(body, content_type, GREY)
    assert images.shape == (2, 1, 28, 28)
    assert np.array_equal(images[1, 0], 255 - DIGIT)


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (DIGIT.tolist(), 1),  # [H, W]
        ([DIGIT.tolist()] * 3, 3),  # [N, H, W]
        ([[DIGIT.tolist()]] * 2, 2),  # [N, C, H, W]
        ({"images": [DIGIT.tolist()]}, 1),
        ({"instances": [DIGIT.astype(float).tolist()]}, 1),  # whole floats are pixels too
    ],
    ids=["hw", "nhw", "nchw", "images-key", "instances-floats"],
)
def test_json_pixels_in_every_documented_shape(value, count):
    images = decode(json.dumps(value).encode(), "application/json", GREY)
    assert images.shape == (count, 1, 28, 28) and np.array_equal(images[0, 0], DIGIT)


def test_json_for_an_rgb_model_takes_chw_and_nchw():
    chw = COLOUR.transpose(2, 0, 1)
    assert decode(json.dumps(chw.tolist()).encode(), "application/json", RGB).shape == (1, 3, 32, 32)
    assert decode(json.dumps([chw.tolist()] * 2).encode(), "application/json", RGB).shape == (2, 3, 32, 32)


def test_a_model_trained_on_an_image_folder_gets_other_sizes_and_channels_resized():
    images = decode(encoded(COLOUR), "image/png", FOLDER)  # 32x32 RGB -> 28x28 grey, as training did
    assert images.shape == (1, 1, 28, 28)


BIG = np.zeros((2000, 2000), np.uint8)


@pytest.mark.parametrize(
    ("body", "content_type", "limits", "status", "reason"),
    [
        (b"", "image/png", GREY, 400, r"^empty body: send an image"),
        (b"this is not an image at all", "image/png", GREY, 400, r"^the body is not an image Pillow can read"),
        (b"\x89PNG\r\n\x1a\nnot really", "image/png", GREY, 400, r"^the body: a damaged image"),
        (encoded(DIGIT)[:60], "image/png", GREY, 400, r"^the body: a damaged image"),
        (b"{not json", "application/json", GREY, 400, r"^body is not JSON"),
        (encoded(COLOUR), "image/png", GREY, 422, r"^the body: a RGB image \(3 channels\); the model takes 1-channel"),
        (encoded(DIGIT), "image/png", RGB, 422, r"^the body: a L image \(1 channel\); the model takes 3-channel"),
        (encoded(DIGIT[:20, :20]), "image/png", GREY, 422, r"^the body: a 20x20 image; the model takes 28x28"),
        (encoded(DIGIT, mode="RGBA"), "image/png", GREY, 422, r"a RGBA image \(4 channels\)"),
        (json.dumps([[1, 2], [3]]).encode(), "application/json", GREY, 422, r"ragged array"),
        (json.dumps([[1, 2], [3, 4]]).encode(), "application/json", GREY, 422, r"JSON pixels of shape \[2, 2\]"),
        (json.dumps([DIGIT.tolist()] * 9).encode(), "application/json", GREY, 413, r"9 images in one request"),
        (json.dumps((DIGIT / 255).tolist()).encode(), "application/json", GREY, 422, r"whole numbers 0-255"),
        (json.dumps([["a"] * 28] * 28).encode(), "application/json", GREY, 422, r"numbers 0-255, got str"),
        (json.dumps({"pixels": []}).encode(), "application/json", GREY, 422, r'without "images"'),
        (json.dumps([]).encode(), "application/json", GREY, 422, r"JSON pixels of shape \[0\]"),
        (b"x" * 200_001, "image/png", GREY, 413, r"^body of 200001 bytes; the limit is 200000"),
        (encoded(BIG), "image/png", GREY, 422, r"2000x2000 image"),
        (b"hello", "text/plain", GREY, 415, r"^content type 'text/plain': send image/png"),
        (b"--x--\r\n", "multipart/form-data", GREY, 400, r"without a boundary"),
    ],
    ids=[
        "empty",
        "garbage",
        "png-header-only",
        "truncated",
        "bad-json",
        "rgb-for-grey",
        "grey-for-rgb",
        "wrong-size",
        "rgba",
        "ragged",
        "wrong-shape",
        "too-many",
        "normalised",
        "strings",
        "no-images-key",
        "empty-array",
        "huge",
        "big-image",
        "text",
        "no-boundary",
    ],
)  # fmt: skip
def test_a_bad_body_is_a_4xx_with_one_line(body, content_type, limits, status, reason):
    with pytest.raises(BadRequest, match=reason) as refused:
        decode(body, content_type, limits)
    assert refused.value.status == status
    assert "\n" not in refused.value.reason and len(refused.value.reason) < 200


def test_too_many_files_in_a_form_and_an_empty_file_field():
    body, content_type = multipart([(f"{i}.png", encoded(DIGIT)) for i in range(9)])
    with pytest.raises(BadRequest, match="9 images in one request; the limit is 8") as refused:
        decode(body, content_type, GREY)
    assert refused.value.status == 413
    body, content_type = multipart([("a.png", encoded(DIGIT)), ("empty.png", b"")])
    with pytest.raises(BadRequest, match="form field 'empty.png' is empty"):
        decode(body, content_type, GREY)
    body, content_type = multipart([("a.png", encoded(DIGIT)), ("b.txt", b"hello")])
    with pytest.raises(BadRequest, match="form field 'b.txt' is not an image"):
        decode(body, content_type, GREY)


def test_a_decompression_bomb_is_refused_before_it_is_decoded():
    # a PNG that claims 10,000 x 10,000 pixels in a few kilobytes
    bomb = encoded(np.zeros((10_000, 10_000), np.uint8))
    assert len(bomb) < 200_000
    with pytest.raises(BadRequest, match=r"10000x10000 image; the limit is") as refused:
        decode(bomb, "image/png", GREY)
    assert refused.value.status == 413
