"""Decode base64 JPEG/PNG images into `numpy.uint8` arrays (H x W x 3, RGB), within limits.

Errors carry the HTTP status the server answers with: `ImageDecodeError` (422) for anything that is
not a decodable JPEG/PNG (truncated or inconsistent data included), `ImageTooLargeError` (413) for
an image wider or taller than the limit, over the request's `PixelBudget` (decoded pixels summed
over its images) or whose decoding would take more memory than the budget's per-image limit (all
checked from the header, before any pixel is decoded: PNG's IHDR, JPEG's SOF). Large JPEGs are
decoded reduced (DCT scaling) towards the model's input size; 16-bit greyscale PNGs are scaled to 8
bits.

A base64 image is checked on its first decoded bytes before the rest of the string is decoded
(`sniff_image_b64`): the magic bytes, the header's size against the limits above, and the
string's length against what an image of that size can take, so a 30 MB string of zeros, or a
valid 8x8 header followed by megabytes of padding, is refused (422) without decoding it. The
rest is then decoded in slices (`b64_to_bytes`), never holding a whitespace-free copy of it.

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
import struct
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from PIL import Image

__all__ = [
    "ImageDecodeError",
    "ImageTooLargeError",
    "ImageHeader",
    "PixelBudget",
    "b64_head",
    "b64_to_bytes",
    "sniff_image_b64",
    "png_decode_bytes",
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
    """How many bytes the base64 string `data` decodes to (counted, nothing decoded).

    Example:
        >>> b64_decoded_size("aGVsbG8=\\n"), len(b"hello")
        (5, 5)
    """
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
    """The first `nbytes` bytes that the base64 string `data` decodes to (fewer if it is
    shorter), decoding only the characters they need.

    Example:
        >>> b64_head(base64.b64encode(b"PNG!" + bytes(10**6)).decode(), 4)
        b'PNG!'
    """
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
    """Strict base64 decoding; accepts a `data:...;base64,` prefix and embedded whitespace.

    A string longer than one slice is decoded slice by slice into one buffer, so decoding
    holds the decoded bytes and one slice, never a whitespace-free copy of the whole string.
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


def _check_side(width: int, height: int, max_side: int, what: str) -> None:
    if width <= 0 or height <= 0:
        raise ImageDecodeError(f"{what} has an empty size {width}x{height}")
    if max(width, height) > max_side:
        raise ImageTooLargeError(
            f"{what} is {width}x{height}, larger than the limit of {max_side} pixels per side"
        )


class PixelBudget:
    """How many decoded pixels one request may still spend (summed over its images), and how
    much memory decoding one image may take; `take` raises 413 past either.

    Charged from image headers *before* the pixels are decoded, so a request of many small
    files that declare huge images is refused without decoding them. Images are decoded one at
    a time, so `max_image_bytes` bounds the memory a request's decoding holds at once.

    Example:
        >>> budget = PixelBudget(1000, max_image_bytes=2000)
        >>> budget.take(600, "frames[0]", decode_bytes=1800); budget.left
        400
        >>> for pixels, nbytes in ((600, 100), (10, 4000)):
        ...     try:
        ...         budget.take(pixels, "frames[1]", decode_bytes=nbytes)
        ...     except ImageTooLargeError as exc:
        ...         print(exc.status_code, str(exc)[:45])
        413 frames[1]: decoding it would exceed the limit
        413 frames[1]: decoding it would take 4000 bytes
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
    """Memory (bytes) decoding a `width` x `height` PNG of Pillow `mode` takes at its peak.

    Example:
        >>> png_decode_bytes(4096, 4096, "RGB") // 2**20, png_decode_bytes(4096, 4096, "L") // 2**20
        (65, 17)
    """
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


def _jpeg_cost(width: int, height: int, target: int) -> tuple[int, int]:
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
    _check_side(width, height, max_side, what)
    if budget is not None:
        pixels, nbytes = _jpeg_cost(width, height, target)
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
    """Decode JPEG or PNG bytes to a C-contiguous `uint8` array of shape (H, W, 3).

    The side limit and the request's pixel `budget` are checked from the header before any
    pixel is decoded. JPEGs are decoded reduced (DCT scaling) towards `target_side` per side,
    never below it, and large PNGs are box-reduced by an integer factor likewise; truncated or
    inconsistent data (e.g. a JPEG declaring more pixels than it carries) raises
    `ImageDecodeError`.
    """
    if not data:
        raise ImageDecodeError(f"{what} is empty")
    if data.startswith(_JPEG_MAGIC):
        return np.ascontiguousarray(_decode_jpeg(data, max_side, what, budget, target_side))
    if not data.startswith(_PNG_MAGIC):
        raise ImageDecodeError(f"{what} is neither JPEG nor PNG (first bytes {data[:8]!r})")
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as img:
            _check_side(img.width, img.height, max_side, what)
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


class ImageHeader(NamedTuple):
    """What an image's first bytes say: its format, size and (PNG) Pillow mode, and the most
    bytes a file of that format and size can take (`max_file_bytes`).

    Example:
        >>> ImageHeader("png", 8, 8, "RGB", 1 << 20).width
        8
    """

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
        return ImageHeader("jpeg", width, height, "RGB", _JPEG_WORST_BPP * width * height
                           + _FILE_SLACK)  # fmt: skip
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
    """Check a base64 image from its first decoded bytes, before the rest is decoded.

    The magic bytes (JPEG or PNG, else 422), the header's size (PNG IHDR, JPEG SOF) against
    `max_side` and the `budget`'s limits (413; nothing is charged), and the string's decoded
    length against the most a file of that format and size can take (422: padding or not an
    image).

    Example:
        >>> buf = io.BytesIO(); Image.new("RGB", (2, 1)).save(buf, "PNG")
        >>> sniff_image_b64(base64.b64encode(buf.getvalue()).decode())[:4]
        ('png', 2, 1, 'RGB')
        >>> padded = base64.b64encode(buf.getvalue() + bytes(2**21)).decode()
        >>> for text in ("A" * 40_000_000, padded):
        ...     try:
        ...         sniff_image_b64(text)
        ...     except ImageDecodeError as exc:
        ...         print(exc.status_code, str(exc).split(" (")[0])
        422 image is neither JPEG nor PNG
        422 image is 2097224 bytes, more than a 2x1 PNG can take
    """
    head = b64_head(data, 64, what=what)
    if head.startswith(_PNG_MAGIC):
        header = _png_header(head, what)
    elif head.startswith(_JPEG_MAGIC):
        header = _jpeg_header(data, head, what)
    else:
        raise ImageDecodeError(f"{what} is neither JPEG nor PNG (first bytes {head[:8]!r})")
    _check_side(header.width, header.height, max_side, what)
    if budget is not None:
        if header.kind == "jpeg":
            pixels, nbytes = _jpeg_cost(header.width, header.height, target_side)
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
