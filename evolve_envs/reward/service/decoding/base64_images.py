"""Base64 images: strict base64, an image checked on its first decoded bytes (magic bytes, header
size, string length) before the rest is decoded in slices (docs/reward-service.md, "Decoding").

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
import struct
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from evolve_envs.reward.service.decoding.images import (
    JPEG_MAGIC,
    PNG_MAGIC,
    ImageDecodeError,
    ImageTooLargeError,
    PixelBudget,
    check_side,
    decode_image_bytes,
    jpeg_decode_cost,
    png_decode_bytes,
)

__all__ = [
    "ImageHeader",
    "b64_decoded_size",
    "b64_head",
    "b64_to_bytes",
    "sniff_image_b64",
    "decode_image_b64",
]

_B64_WHITESPACE = " \t\n\r\x0b\x0c"
# Base64 characters decoded at a time (a multiple of 4): bounds the copies a long string needs.
_B64_SLICE = 1 << 20


def _b64_start(data: object, what: str) -> int:
    """Where the base64 text of `data` starts (after a `data:...;base64,` prefix)."""
    if not isinstance(data, str):
        raise ImageDecodeError(f"{what} must be a base64 string, got {type(data).__name__}")
    if data.startswith("data:"):
        comma = data.find(",", 0, 1024)
        if comma < 0:
            raise ImageDecodeError(f"{what}: data URL without a comma")
        return comma + 1
    return 0


def _b64_slices(data: str, start: int) -> Iterator[str]:
    """The base64 text of `data` from `start`, whitespace removed, in slices of
    `_B64_SLICE` characters or fewer (a multiple of 4 except the last)."""
    carry = ""
    has_space = any(c in data for c in _B64_WHITESPACE)
    for pos in range(start, len(data), _B64_SLICE):
        piece = data[pos : pos + _B64_SLICE]
        if has_space:
            piece = "".join(piece.split())
        piece = carry + piece
        cut = len(piece) - len(piece) % 4
        carry = piece[cut:]
        if cut:
            yield piece[:cut]
    if carry:
        yield carry


def _b64_decode_slice(text: str, last: bool, what: str) -> bytes:
    """Strict decoding of one slice: the alphabet only, `=` padding only at the very end."""
    if not last and "=" in text:
        raise ImageDecodeError(f"{what} is not valid base64: padding before the end")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageDecodeError(f"{what} is not valid base64: {exc}") from None


def b64_decoded_size(data: str, *, what: str = "image") -> int:
    """How many bytes the base64 string `data` decodes to (counted, nothing decoded)."""
    start = _b64_start(data, what)
    chars = len(data) - start - sum(data.count(c, start) for c in _B64_WHITESPACE)
    if chars <= 0:
        raise ImageDecodeError(f"{what} is empty")
    pad = 0
    end = len(data.rstrip(_B64_WHITESPACE))
    while pad < 2 and end > start and data[end - 1] == "=":
        pad, end = pad + 1, end - 1
    return chars // 4 * 3 + max(0, chars % 4 - 1) - pad


def b64_head(data: str, nbytes: int, *, what: str = "image") -> bytes:
    """The first `nbytes` bytes `data` decodes to, decoding only the characters they need."""
    start = _b64_start(data, what)
    need = -(-nbytes // 3) * 4
    text = []
    got = 0
    step = max(need, 4096)
    pos = start
    while got < need and pos < len(data):
        piece = "".join(data[pos : pos + step].split())
        pos += step
        text.append(piece)
        got += len(piece)
    joined = "".join(text)
    last = pos >= len(data) and len(joined) <= need
    joined = joined[:need] if not last else joined
    if not joined:
        raise ImageDecodeError(f"{what} is empty")
    if not last:
        joined = joined[: len(joined) - len(joined) % 4]
    return _b64_decode_slice(joined, last, what)[:nbytes]


def b64_to_bytes(data: str, *, what: str = "image", max_bytes: int | None = None) -> bytes:
    """Strict base64 (a `data:...;base64,` prefix and whitespace accepted), decoded slice by slice.

    `max_bytes`: refuse (413) a string that would decode to more, before decoding any of it.
    """
    start = _b64_start(data, what)
    if max_bytes is not None:
        size = b64_decoded_size(data, what=what)
        if size > max_bytes:
            raise ImageTooLargeError(
                f"{what} decodes to {size} bytes, more than the limit of {max_bytes}"
            )
    slices = _b64_slices(data, start)
    first = next(slices, None)
    if first is None:
        raise ImageDecodeError(f"{what} is empty")
    following = next(slices, None)
    if following is None:
        return _b64_decode_slice(first, True, what)
    out = io.BytesIO()  # getvalue() hands over its buffer without a copy
    out.write(_b64_decode_slice(first, False, what))
    while following is not None:
        current, following = following, next(slices, None)
        out.write(_b64_decode_slice(current, following is None, what))
    return out.getvalue()


class ImageHeader(NamedTuple):
    """An image's format, size, (PNG) Pillow mode and the most bytes such a file can take."""

    kind: str
    width: int
    height: int
    mode: str
    max_file_bytes: int


# PNG (bit depth, colour type) -> the Pillow mode it opens as, and its channels.
_PNG_MODES = {
    (1, 0): ("1", 1), (2, 0): ("L", 1), (4, 0): ("L", 1), (8, 0): ("L", 1), (16, 0): ("I;16", 1),
    (8, 2): ("RGB", 3), (16, 2): ("RGB", 3),
    (1, 3): ("P", 1), (2, 3): ("P", 1), (4, 3): ("P", 1), (8, 3): ("P", 1),
    (8, 4): ("LA", 2), (16, 4): ("RGBA", 2), (8, 6): ("RGBA", 4), (16, 6): ("RGBA", 4),
}  # fmt: skip
# Bytes a file may take beyond its pixels' worst case (ICC profiles, EXIF, text chunks).
_FILE_SLACK = 1 << 20
# Worst-case JPEG bytes per pixel: 4 components, every coefficient coded at full length.
_JPEG_WORST_BPP = 16
# How much of a JPEG is decoded to find its frame header: first this, then at most that.
_JPEG_HEAD_BYTES = (64 * 1024, 1 << 20)


def _png_header(head: bytes, what: str) -> ImageHeader:
    """The IHDR chunk (always first: signature, length, type, 13 bytes of data)."""
    if len(head) < 26 or head[12:16] != b"IHDR":
        raise ImageDecodeError(f"{what} is a PNG whose first chunk is not IHDR")
    width, height = struct.unpack(">II", head[16:24])
    depth, colour = head[24], head[25]
    if (depth, colour) not in _PNG_MODES:
        raise ImageDecodeError(
            f"{what} is a PNG with an invalid bit depth {depth} for colour type {colour}"
        )
    mode, channels = _PNG_MODES[depth, colour]
    raw = height * (1 + -(-width * channels * depth // 8))  # a filter byte per row
    return ImageHeader("png", width, height, mode, 2 * raw + _FILE_SLACK)


def _jpeg_header(data: str, head: bytes, what: str) -> ImageHeader:
    """The frame header (SOF) of a JPEG, from as few leading bytes as hold it."""
    import simplejpeg

    for size in _JPEG_HEAD_BYTES:
        if size > len(head):
            head = b64_head(data, size, what=what)
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(head)
        except Exception as exc:  # noqa: BLE001 - simplejpeg raises ValueError and friends
            if len(head) < size:  # the whole file: no header anywhere
                raise ImageDecodeError(f"{what} has no readable JPEG header: {exc}") from None
            continue
        return ImageHeader(
            "jpeg", width, height, "RGB", _JPEG_WORST_BPP * width * height + _FILE_SLACK
        )
    raise ImageDecodeError(
        f"{what} has no readable JPEG frame header in its first {_JPEG_HEAD_BYTES[-1]} bytes"
    )


def sniff_image_b64(
    data: str,
    *,
    max_side: int = 4096,
    what: str = "image",
    budget: PixelBudget | None = None,
    target_side: int = 448,
) -> ImageHeader:
    """Check a base64 image from its first decoded bytes: magic (422), size against the limits
    (413, nothing charged), string length against what such a file can take (422).

    Example:
        >>> from PIL import Image
        >>> buf = io.BytesIO(); Image.new("RGB", (2, 1)).save(buf, "PNG")
        >>> sniff_image_b64(base64.b64encode(buf.getvalue()).decode())[:4]
        ('png', 2, 1, 'RGB')
    """
    head = b64_head(data, 64, what=what)
    if head.startswith(PNG_MAGIC):
        header = _png_header(head, what)
    elif head.startswith(JPEG_MAGIC):
        header = _jpeg_header(data, head, what)
    else:
        raise ImageDecodeError(f"{what} is neither JPEG nor PNG (first bytes {head[:8]!r})")
    check_side(header.width, header.height, max_side, what)
    if budget is not None:
        if header.kind == "jpeg":
            pixels, nbytes = jpeg_decode_cost(header.width, header.height, target_side)
        else:
            pixels = header.width * header.height
            nbytes = png_decode_bytes(header.width, header.height, header.mode, target_side)
        budget.check(pixels, what, decode_bytes=nbytes)
    size = b64_decoded_size(data, what=what)
    if size > header.max_file_bytes:
        raise ImageDecodeError(
            f"{what} is {size} bytes, more than a {header.width}x{header.height} "
            f"{header.kind.upper()} can take ({header.max_file_bytes}): padded, or not an image"
        )
    return header


def decode_image_b64(
    data: str,
    *,
    max_side: int = 4096,
    what: str = "image",
    budget: PixelBudget | None = None,
    target_side: int = 448,
) -> np.ndarray:
    """Base64 JPEG/PNG string to a `uint8` (H, W, 3) array (see `decode_image_bytes`).

    Checked from its first decoded bytes (`sniff_image_b64`) before the rest is decoded.
    """
    header = sniff_image_b64(
        data, max_side=max_side, what=what, budget=budget, target_side=target_side
    )
    return decode_image_bytes(
        b64_to_bytes(data, what=what, max_bytes=header.max_file_bytes),
        max_side=max_side,
        what=what,
        budget=budget,
        target_side=target_side,
    )
