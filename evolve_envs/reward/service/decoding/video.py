"""Read an episode video (a path inside the allowed directories, or inline bytes) with an
allow-listed demuxer and sample frames uniformly, within limits checked before and while decoding
(docs/reward-service.md, "Decoding").

Example:
    >>> sample_indices(10, 4)
    [0, 3, 6, 9]
    >>> container_format(b"\\x1aE\\xdf\\xa3 rest of a webm file")
    'matroska'
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from evolve_envs.reward.protocol.wire import sample_indices

__all__ = [
    "VideoDecodeError",
    "VideoTooLargeError",
    "VideoPathRefusedError",
    "container_format",
    "sample_indices",
    "read_video_file",
    "read_video_bytes",
]

_MP4_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")


class VideoDecodeError(ValueError):
    """The video is missing or cannot be decoded (HTTP 422)."""

    status_code = 422


class VideoTooLargeError(VideoDecodeError):
    """The video has more frames, or larger frames, than the server accepts (HTTP 413)."""

    status_code = 413


class VideoPathRefusedError(VideoDecodeError):
    """Path mode is off: the server reads no files named by callers (HTTP 403)."""

    status_code = 403


def container_format(head: bytes) -> str | None:
    """The allowed demuxer for a file starting with `head`, or None (not an allowed format)."""
    if len(head) >= 8 and head[4:8] in _MP4_BOXES:
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "matroska"
    if head.startswith(b"RIFF") and head[8:12] == b"AVI ":
        return "avi"
    return None


def _target_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / float(width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def _declared_pixels(width: int, height: int) -> int:
    """The most pixels FFmpeg may allocate for a frame declared `width` x `height`: it checks
    the width aligned up to its stride alignment (at most 64) and codecs round heights up to
    their block size (16; 64 for some), so the bound leaves that much room."""
    return (-(-width // 64) * 64) * (-(-height // 64) * 64)


def _decode_sampled(
    source: io.BufferedIOBase | io.BytesIO,
    fmt: str,
    *,
    nframes: int,
    max_pixels: int,
    max_frames: int,
    max_side: int,
    max_decode_pixels: int,
    max_frame_bytes: int,
) -> list[np.ndarray]:
    import av

    max_frame_pixels = min(max_side * max_side, max(1, max_frame_bytes // 3))
    try:
        container = av.open(
            source, mode="r", format=fmt, options={"max_pixels": str(max_frame_pixels)}
        )
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise VideoDecodeError(f"video cannot be opened as {fmt} ({type(exc).__name__})") from None
    with container:
        try:
            stream, width, height, total = _probe(
                container, max_side=max_side, max_frames=max_frames, max_frame_bytes=max_frame_bytes
            )
        except VideoDecodeError:
            raise
        except (av.FFmpegError, ValueError, OSError, EOFError) as exc:  # demuxing, seeking
            raise VideoDecodeError(f"video cannot be read ({type(exc).__name__})") from None
        if total * width * height > max_decode_pixels:
            raise VideoTooLargeError(
                f"video has {total} frames of {width}x{height}: decoding them would exceed the "
                f"limit of {max_decode_pixels} decoded pixels per request"
            )
        wanted = sample_indices(total, nframes)
        out_w, out_h = _target_size(width, height, max_pixels)
        keep: dict[int, np.ndarray] = {}
        want = set(wanted)
        # The decoder opens at the first decode: from then on no frame larger than declared.
        stream.codec_context.options = {"max_pixels": str(_declared_pixels(width, height))}
        decoded = 0
        try:
            for index, frame in enumerate(container.decode(stream)):
                if index >= total or len(keep) == len(want):
                    break
                decoded += frame.width * frame.height
                if decoded > max_decode_pixels:
                    raise VideoTooLargeError(
                        f"video decoding reached {decoded} pixels at frame {index}, over the "
                        f"limit of {max_decode_pixels} decoded pixels per request"
                    )
                if max(frame.width, frame.height) > max_side:
                    raise VideoTooLargeError(f"a video frame is over {max_side} pixels per side")
                if index in want:
                    keep[index] = frame.to_ndarray(format="rgb24", width=out_w, height=out_h)
        except VideoDecodeError:
            raise
        except (av.FFmpegError, ValueError, OSError) as exc:
            now = stream.codec_context
            if now.width * now.height > width * height:  # refused by the decoder's max_pixels
                raise VideoTooLargeError(
                    f"video switches mid-stream from the {width}x{height} frames its container "
                    f"declares to {now.width}x{now.height}"
                ) from None
            if not keep:
                raise VideoDecodeError(f"video cannot be decoded ({type(exc).__name__})") from None
    if not keep:
        raise VideoDecodeError("video has no decodable frames")
    # A stream that declared more frames than it holds: sample among those decoded.
    got = sorted(keep)
    if len(got) < len(wanted):
        return [np.ascontiguousarray(keep[got[i]]) for i in sample_indices(len(got), nframes)]
    return [np.ascontiguousarray(keep[i]) for i in wanted]


def _probe(
    container: Any, *, max_side: int, max_frames: int, max_frame_bytes: int
) -> tuple[Any, int, int, int]:
    """The video stream, its frame size and frame count, read from the container (packets
    counted, never decoded, when it does not say), within the limits."""
    if not container.streams.video:
        raise VideoDecodeError("video has no video stream")
    stream = container.streams.video[0]
    if stream.codec_context is None:
        raise VideoDecodeError("video stream has a codec this server cannot decode")
    width, height = stream.codec_context.width, stream.codec_context.height
    if width <= 0 or height <= 0:
        raise VideoDecodeError("video declares no frame size")
    if max(width, height) > max_side:
        raise VideoTooLargeError(
            f"video frames are {width}x{height}, over the limit of {max_side} pixels per side"
        )
    if width * height * 3 > max_frame_bytes:
        raise VideoTooLargeError(
            f"video frames are {width}x{height}: decoding one would take "
            f"{width * height * 3} bytes of memory, over the limit of {max_frame_bytes} bytes"
        )
    total = int(stream.frames or 0)
    if total > max_frames:
        raise VideoTooLargeError(f"video has {total} frames, more than the limit of {max_frames}")
    if total <= 0:  # the container does not say: count packets (no decoding)
        total = 0
        for packet in container.demux(stream):
            if packet.size:
                total += 1
                if total > max_frames:
                    raise VideoTooLargeError(f"video has more than {max_frames} frames")
        container.seek(0, stream=stream)
    return stream, width, height, total


def _resolve_inside(path: str, allowed_dirs: Sequence[str]) -> str:
    """`path` resolved (symlinks followed) if it lies inside one of `allowed_dirs`."""
    if not allowed_dirs:
        raise VideoPathRefusedError(
            "video_path is not accepted: this server reads no files (the operator enables path "
            "mode with --video-dir); send the video inline as video_b64"
        )
    refused = VideoDecodeError("video_path is not a readable file inside the allowed directories")
    if not isinstance(path, str) or not path or "\x00" in path:
        raise refused
    real = os.path.realpath(path)
    for root in allowed_dirs:
        root_real = os.path.realpath(root)
        try:
            inside = os.path.commonpath([real, root_real]) == root_real
        except ValueError:
            inside = False
        if inside and real != root_real and os.path.isfile(real):
            return real
    raise refused


def read_video_file(
    path: str,
    *,
    allowed_dirs: Sequence[str] = (),
    nframes: int = 16,
    max_pixels: int = 200704,
    max_frames: int = 10000,
    max_side: int = 4096,
    max_decode_pixels: int = 2**31,
    max_frame_bytes: int = 32 * 1024 * 1024,
) -> list[np.ndarray]:
    """Decode the video at `path` (inside `allowed_dirs`), `nframes` sampled, `max_pixels` each."""
    real = _resolve_inside(path, allowed_dirs)
    try:
        with open(real, "rb") as fh:
            fmt = container_format(fh.read(16))
            if fmt is None:
                raise VideoDecodeError("video_path is not an MP4, MOV, Matroska/WebM or AVI file")
            fh.seek(0)
            return _decode_sampled(
                fh,
                fmt,
                nframes=nframes,
                max_pixels=max_pixels,
                max_frames=max_frames,
                max_side=max_side,
                max_decode_pixels=max_decode_pixels,
                max_frame_bytes=max_frame_bytes,
            )
    except OSError:
        raise VideoDecodeError(
            "video_path is not a readable file inside the allowed directories"
        ) from None


def read_video_bytes(
    data: bytes,
    *,
    nframes: int = 16,
    max_pixels: int = 200704,
    max_frames: int = 10000,
    max_side: int = 4096,
    max_decode_pixels: int = 2**31,
    max_frame_bytes: int = 32 * 1024 * 1024,
) -> list[np.ndarray]:
    """Like `read_video_file` for an encoded video held in memory (never written to disk)."""
    if not data:
        raise VideoDecodeError("video is empty")
    fmt = container_format(data[:16])
    if fmt is None:
        raise VideoDecodeError("video is not an MP4, MOV, Matroska/WebM or AVI file")
    return _decode_sampled(
        io.BytesIO(data),
        fmt,
        nframes=nframes,
        max_pixels=max_pixels,
        max_frames=max_frames,
        max_side=max_side,
        max_decode_pixels=max_decode_pixels,
        max_frame_bytes=max_frame_bytes,
    )
