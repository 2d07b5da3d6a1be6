"""Decode base64 JPEG/PNG images into `numpy.uint8` arrays (H x W x 3, RGB), within limits.

Errors carry the HTTP status the server answers with: `ImageDecodeError` (422) for anything that
is not a decodable JPEG/PNG, `ImageTooLargeError` (413) for an image wider or taller than the
limit (checked from the header, before the pixels are decoded).

Example:
    >>> import base64, io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("RGB", (8, 4), (10, 20, 30)).save(buf, "PNG")
    >>> decode_image_b64(base64.b64encode(buf.getvalue()).decode(), max_side=64).shape
    (4, 8, 3)
"""

from __future__ import annotations

import base64
import binascii
import io
import math

import numpy as np
from PIL import Image

__all__ = [
    "ImageDecodeError",
    "ImageTooLargeError",
    "b64_to_bytes",
    "decode_image_bytes",
    "decode_image_b64",
    "resize_square",
    "resize_max_pixels",
]

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ImageDecodeError(ValueError):
    """The payload is not a decodable image (HTTP 422)."""

    status_code = 422


class ImageTooLargeError(ImageDecodeError):
    """The image exceeds the configured side limit (HTTP 413)."""

    status_code = 413


def b64_to_bytes(data: str, *, what: str = "image") -> bytes:
    """Strict base64 decoding; accepts a `data:...;base64,` prefix and embedded whitespace."""
    if not isinstance(data, str):
        raise ImageDecodeError(f"{what} must be a base64 string, got {type(data).__name__}")
    if data.startswith("data:"):
        _, sep, data = data.partition(",")
        if not sep:
            raise ImageDecodeError(f"{what}: data URL without a comma")
    data = "".join(data.split())
    if not data:
        raise ImageDecodeError(f"{what} is empty")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageDecodeError(f"{what} is not valid base64: {exc}") from exc


def _check_side(width: int, height: int, max_side: int, what: str) -> None:
    if width <= 0 or height <= 0:
        raise ImageDecodeError(f"{what} has an empty size {width}x{height}")
    if max(width, height) > max_side:
        raise ImageTooLargeError(
            f"{what} is {width}x{height}, larger than the limit of {max_side} pixels per side"
        )


def _decode_jpeg_fast(data: bytes, max_side: int, what: str) -> np.ndarray | None:
    try:
        import simplejpeg
    except ImportError:  # pragma: no cover - simplejpeg is a core dependency
        return None
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except Exception:  # noqa: BLE001 - let Pillow try (and produce the error message)
        return None
    _check_side(width, height, max_side, what)
    try:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    except Exception:  # noqa: BLE001
        return None


def decode_image_bytes(data: bytes, *, max_side: int = 4096, what: str = "image") -> np.ndarray:
    """Decode JPEG or PNG bytes to a C-contiguous `uint8` array of shape (H, W, 3)."""
    if not data:
        raise ImageDecodeError(f"{what} is empty")
    if data.startswith(_JPEG_MAGIC):
        fast = _decode_jpeg_fast(data, max_side, what)
        if fast is not None:
            return np.ascontiguousarray(fast)
    elif not data.startswith(_PNG_MAGIC):
        raise ImageDecodeError(f"{what} is neither JPEG nor PNG (first bytes {data[:8]!r})")
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG", "PNG"]) as img:
            _check_side(img.width, img.height, max_side, what)
            img.load()
            rgb = img.convert("RGB")
    except ImageDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for corrupt data
        raise ImageDecodeError(f"{what} could not be decoded: {exc}") from exc
    return np.asarray(rgb, dtype=np.uint8).copy()


def decode_image_b64(data: str, *, max_side: int = 4096, what: str = "image") -> np.ndarray:
    """Base64 JPEG/PNG string to a `uint8` (H, W, 3) array."""
    return decode_image_bytes(b64_to_bytes(data, what=what), max_side=max_side, what=what)


def resize_square(frame: np.ndarray, size: int = 448) -> np.ndarray:
    """Resize to `size` x `size` (bicubic); frames already that size are returned as they are."""
    if frame.shape[0] == size and frame.shape[1] == size:
        return frame
    img = Image.fromarray(frame).resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.uint8)


def resize_max_pixels(frame: np.ndarray, max_pixels: int) -> np.ndarray:
    """Shrink (keeping the aspect ratio) so that height * width <= `max_pixels`."""
    h, w = frame.shape[:2]
    if h * w <= max_pixels:
        return frame
    scale = math.sqrt(max_pixels / float(h * w))
    new_h, new_w = max(1, int(h * scale)), max(1, int(w * scale))
    img = Image.fromarray(frame).resize((new_w, new_h), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.uint8)
