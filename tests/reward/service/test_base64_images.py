"""Base64 images are checked on their first decoded bytes, before the rest is decoded: magic
bytes, the header's size against the limits, the string's length against what an image of that
size can take; the rest is decoded slice by slice, whitespace and all, strictly."""

from __future__ import annotations

import base64
import io
import os
import struct
import tracemalloc

import numpy as np
import pytest
from PIL import Image

from evolve_envs.reward.service.decoding.base64_images import (
    b64_decoded_size,
    b64_head,
    b64_to_bytes,
    decode_image_b64,
    sniff_image_b64,
)
from evolve_envs.reward.service.decoding.images import (
    ImageDecodeError,
    ImageTooLargeError,
    PixelBudget,
)


def _png(width: int = 8, height: int = 8, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (width, height)).save(buf, "PNG")
    return buf.getvalue()


def _jpeg(width: int = 64, height: int = 48, app1: int = 0) -> bytes:
    """A JPEG, with an APP1 segment of `app1` bytes (an EXIF block) before its frame header
    when asked (repeated 60 KB segments: one segment holds at most 64 KB)."""
    buf = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), np.uint8)
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    segments = b""
    while app1 > 0:
        size = min(app1, 60_000)
        segments += b"\xff\xe1" + struct.pack(">H", size + 2) + b"x" * size
        app1 -= size
    return data[:2] + segments + data[2:]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_zeros_are_refused_without_decoding_the_string() -> None:
    text = "A" * 30_000_000
    tracemalloc.start()
    try:
        with pytest.raises(ImageDecodeError, match="neither JPEG nor PNG") as info:
            decode_image_b64(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.status_code == 422
    assert peak < 1 << 20, peak  # the 22 MB it decodes to were never allocated


def test_a_valid_header_followed_by_padding_is_refused_from_the_length() -> None:
    padded = _b64(_png() + bytes(3 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ImageDecodeError, match="more than a 8x8 PNG can take") as info:
            decode_image_b64(padded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.status_code == 422 and peak < 1 << 20, peak
    assert decode_image_b64(_b64(_png() + bytes(1000))).shape == (8, 8, 3)  # within the slack


def test_header_size_is_checked_against_the_limits_before_decoding() -> None:
    big = _b64(_png(300, 20))
    with pytest.raises(ImageTooLargeError, match="300x20"):
        sniff_image_b64(big, max_side=256)
    budget = PixelBudget(5000, max_image_bytes=10**6)
    with pytest.raises(ImageTooLargeError, match="decoded pixels"):
        sniff_image_b64(big, budget=budget)
    assert budget.left == 5000  # a check charges nothing
    assert sniff_image_b64(_b64(_png(30, 20, "L"))).mode == "L"
    assert sniff_image_b64(_b64(_jpeg(64, 48))).kind == "jpeg"


def test_a_jpeg_whose_frame_header_comes_after_large_metadata_still_decodes() -> None:
    data = _jpeg(64, 48, app1=200_000)  # the SOF sits 200 KB in, past the first 64 KB
    assert decode_image_b64(_b64(data)).shape == (48, 64, 3)
    no_frame = data[: data.index(b"\xff\xc0")]  # all metadata, no frame header
    with pytest.raises(ImageDecodeError, match="no readable JPEG header"):
        decode_image_b64(_b64(no_frame))


def test_broken_png_headers_are_refused() -> None:
    data = bytearray(_png())
    data[25] = 5  # colour type 5 does not exist
    with pytest.raises(ImageDecodeError, match="colour type 5"):
        sniff_image_b64(_b64(bytes(data)))
    with pytest.raises(ImageDecodeError, match="first chunk is not IHDR"):
        sniff_image_b64(_b64(_png()[:8] + b"\x00\x00\x00\x00IEND"))


@pytest.mark.parametrize("size", [1, 2, 3, 1000, (1 << 20) + 7, 3 * (1 << 20) + 2])
def test_slice_by_slice_decoding_is_exact_with_and_without_whitespace(size: int) -> None:
    data = os.urandom(size)
    for text in (_b64(data), base64.encodebytes(data).decode(), "data:;base64," + _b64(data)):
        assert b64_to_bytes(text) == data
        assert b64_decoded_size(text) == size
        assert b64_head(text, 5) == data[:5]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("AA==" + "AAAA" * 300_000, "padding before the end"),
        ("A" * 5, "not valid base64"),
        ("!!!!" * 10, "not valid base64"),
        ("   \n ", "empty"),
        ("data:image/png;base64", "without a comma"),
    ],
)
def test_malformed_base64_is_refused(text: str, words: str) -> None:
    with pytest.raises(ImageDecodeError, match=words) as info:
        b64_to_bytes(text)
    assert info.value.status_code == 422


def test_a_decoded_size_over_the_limit_is_refused_before_decoding() -> None:
    with pytest.raises(ImageTooLargeError, match="decodes to 3000 bytes, more than the limit"):
        b64_to_bytes(_b64(bytes(3000)), max_bytes=2999)
