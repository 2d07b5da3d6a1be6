"""Decode JPEG/PNG bytes into `numpy.uint8` arrays (H x W x 3, RGB) within limits checked from the
header: `ImageDecodeError` (422) for what is not a decodable image, `ImageTooLargeError` (413) past
the side, the request's `PixelBudget` or the per-image decoding memory.

Example:
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("RGB", (8, 4), (10, 20, 30)).save(buf, "PNG")
    >>> decode_image_bytes(buf.getvalue(), max_side=64).shape
    (4, 8, 3)
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image

__all__ = [
    "JPEG_MAGIC",
    "PNG_MAGIC",
    "ImageDecodeError",
    "ImageTooLargeError",
    "PixelBudget",
    "check_side",
    "jpeg_decode_cost",
    "png_decode_bytes",
    "decode_image_bytes",
    "resize_square",
    "resize_max_pixels",
]

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ImageDecodeError(ValueError):
    """The payload is not a decodable image (HTTP 422)."""

    status_code = 422


class ImageTooLargeError(ImageDecodeError):
    """The image exceeds the configured side limit (HTTP 413)."""

    status_code = 413


def check_side(width: int, height: int, max_side: int, what: str) -> None:
    """Refuse an empty size (422) or a side over `max_side` (413)."""
    if width <= 0 or height <= 0:
        raise ImageDecodeError(f"{what} has an empty size {width}x{height}")
    if max(width, height) > max_side:
        raise ImageTooLargeError(
            f"{what} is {width}x{height}, larger than the limit of {max_side} pixels per side"
        )


class PixelBudget:
    """Decoded pixels one request may still spend, and the memory one image's decoding may take;
    `take` raises 413 past either, from the headers, before decoding.

    Example:
        >>> budget = PixelBudget(1000, max_image_bytes=2000)
        >>> budget.take(600, "frames[0]", decode_bytes=1800); budget.left
        400
    """

    def __init__(self, limit: int, max_image_bytes: int | None = None) -> None:
        self.limit = int(limit)
        self.left = int(limit)
        self.max_image_bytes = max_image_bytes

    def take(self, pixels: int, what: str, decode_bytes: int | None = None) -> None:
        """Charge `pixels`; `decode_bytes` (memory the decoding holds at its peak, estimated
        from the header) must be within `max_image_bytes`."""
        self.check(pixels, what, decode_bytes)
        self.left -= pixels

    def check(self, pixels: int, what: str, decode_bytes: int | None = None) -> None:
        """Raise what `take` would raise, charging nothing."""
        limit = self.max_image_bytes
        if decode_bytes is not None and limit is not None and decode_bytes > limit:
            raise ImageTooLargeError(
                f"{what}: decoding it would take {decode_bytes} bytes of memory, over the limit "
                f"of {limit} bytes per image"
            )
        if pixels > self.left:
            raise ImageTooLargeError(
                f"{what}: decoding it would exceed the limit of {self.limit} decoded pixels "
                "per request"
            )


# Bytes a pixel of a PNG costs while it is decoded, at the peak of `decode_image_bytes`
# (measured with Pillow 11): multi-band modes are held at 4 bytes a pixel and reduced with a
# temporary copy; modes `Image.reduce` lacks (1, P, 16-bit, I, F) are converted at full size
# first; an image too small to be reduced is converted and copied to NumPy at full size.
_PNG_PEAK_BPP = {"L": 1.1, "RGB": 4.1, "1": 5.1, "P": 5.1}
_PNG_PEAK_BPP_WIDE = 12.2  # I;16, I;16B, I;16L, I, F
_PNG_PEAK_BPP_OTHER = 8.1  # RGBA, LA, PA, ...
_PNG_PEAK_BPP_UNREDUCED = 17.0
_JPEG_PEAK_BPP = 3.2  # simplejpeg decodes straight to RGB at the DCT-reduced size


def png_decode_bytes(width: int, height: int, mode: str, target_side: int = 448) -> int:
    """Memory (bytes) decoding a `width` x `height` PNG of Pillow `mode` takes at its peak."""
    if min(width, height) // target_side < 2:
        bpp = _PNG_PEAK_BPP_UNREDUCED
    elif mode in _PNG_PEAK_BPP:
        bpp = _PNG_PEAK_BPP[mode]
    elif mode.startswith("I") or mode == "F":
        bpp = _PNG_PEAK_BPP_WIDE
    else:
        bpp = _PNG_PEAK_BPP_OTHER
    return math.ceil(width * height * bpp)


def _dct_scaled_size(width: int, height: int, target: int) -> tuple[int, int]:
    """Size libjpeg decodes to when asked for at least `target` per side (scale n/8, n <= 8)."""
    for n in range(1, 9):
        w, h = math.ceil(width * n / 8), math.ceil(height * n / 8)
        if w >= min(target, width) and h >= min(target, height):
            return w, h
    return width, height


def jpeg_decode_cost(width: int, height: int, target: int) -> tuple[int, int]:
    """Pixels a JPEG is decoded to (DCT-reduced towards `target`) and the memory it takes."""
    pixels = math.prod(_dct_scaled_size(width, height, target))
    return pixels, math.ceil(pixels * _JPEG_PEAK_BPP)


def _decode_jpeg(
    data: bytes, max_side: int, what: str, budget: PixelBudget | None, target: int
) -> np.ndarray:
    """Decode a JPEG strictly (corrupt or inconsistent data is an error, not grey fill),
    reduced by DCT scaling to no less than `target` pixels per side."""
    import simplejpeg

    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except Exception as exc:  # noqa: BLE001 - simplejpeg raises ValueError and friends
        raise ImageDecodeError(f"{what} has no readable JPEG header: {exc}") from exc
    check_side(width, height, max_side, what)
    if budget is not None:
        pixels, nbytes = jpeg_decode_cost(width, height, target)
        budget.take(pixels, what, decode_bytes=nbytes)
    try:
        return simplejpeg.decode_jpeg(
            data, colorspace="RGB", min_height=min(target, height), min_width=min(target, width)
        )
    except Exception as exc:  # noqa: BLE001
        raise ImageDecodeError(f"{what} is truncated or inconsistent JPEG data: {exc}") from exc


def _png_to_rgb(img: Image.Image) -> Image.Image:
    """RGB view of a decoded PNG; 16-bit greyscale is scaled to 8 bits, not clipped."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        wide = np.asarray(img, dtype=np.uint32 if img.mode == "I" else np.uint16)
        if img.mode == "I":
            wide = np.clip(wide, 0, 65535)
        grey = ((wide.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    return img.convert("RGB")


def decode_image_bytes(
    data: bytes,
    *,
    max_side: int = 4096,
    what: str = "image",
    budget: PixelBudget | None = None,
    target_side: int = 448,
) -> np.ndarray:
    """Decode JPEG or PNG bytes to a C-contiguous `uint8` (H, W, 3) array, limits checked first.

    JPEGs are DCT-reduced and large PNGs box-reduced towards `target_side`, never below it.
    """
    if not data:
        raise ImageDecodeError(f"{what} is empty")
    if data.startswith(JPEG_MAGIC):
        return np.ascontiguousarray(_decode_jpeg(data, max_side, what, budget, target_side))
    if not data.startswith(PNG_MAGIC):
        raise ImageDecodeError(f"{what} is neither JPEG nor PNG (first bytes {data[:8]!r})")
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as img:
            check_side(img.width, img.height, max_side, what)
            if budget is not None:
                nbytes = png_decode_bytes(img.width, img.height, img.mode, target_side)
                budget.take(img.width * img.height, what, decode_bytes=nbytes)
            img.load()
            factor = min(img.width, img.height) // target_side
            if factor >= 2:  # like the JPEG path: reduced, never below target_side
                try:
                    img = img.reduce(factor)
                except ValueError:  # a mode reduce() lacks (e.g. 16-bit): convert first
                    img = _png_to_rgb(img).reduce(factor)
            rgb = _png_to_rgb(img)
    except ImageDecodeError:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own check of the declared size
        raise ImageTooLargeError(f"{what} declares too many pixels: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for corrupt data
        raise ImageDecodeError(f"{what} could not be decoded: {exc}") from exc
    return np.asarray(rgb, dtype=np.uint8).copy()


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
