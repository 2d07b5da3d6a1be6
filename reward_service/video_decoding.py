"""Read an episode video (path or inline bytes) and sample frames uniformly for scoring.

`sample_indices(total, nframes)` picks `nframes` indices spread evenly from the first to the
last frame (all frames if there are fewer). Frames are shrunk to at most `max_pixels` pixels.

Example:
    >>> sample_indices(10, 4)
    [0, 3, 6, 9]
    >>> sample_indices(3, 16)
    [0, 1, 2]
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from reward_service.image_decoding import resize_max_pixels
from reward_service.protocol import sample_indices

__all__ = [
    "VideoDecodeError",
    "VideoTooLargeError",
    "sample_indices",
    "read_video_file",
    "read_video_bytes",
]


class VideoDecodeError(ValueError):
    """The video is missing or cannot be decoded (HTTP 422)."""

    status_code = 422


class VideoTooLargeError(VideoDecodeError):
    """The video has more frames than the server accepts (HTTP 413)."""

    status_code = 413


def _to_rgb(frame: np.ndarray) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim == 2:
        frame = np.repeat(frame[..., None], 3, axis=2)
    if frame.shape[-1] == 4:
        frame = frame[..., :3]
    return np.ascontiguousarray(frame.astype(np.uint8, copy=False))


def read_video_file(
    path: str, *, nframes: int = 16, max_pixels: int = 200704, max_frames: int = 10000
) -> list[np.ndarray]:
    """Decode the video at `path`, sample `nframes` frames uniformly, resize to `max_pixels`."""
    if not os.path.isfile(path):
        raise VideoDecodeError(f"video_path {path!r} does not exist or is not a file")
    import imageio.v2 as imageio

    frames: list[np.ndarray] = []
    try:
        reader = imageio.get_reader(path, format="FFMPEG")
    except Exception as exc:  # noqa: BLE001 - imageio raises many types for bad input
        raise VideoDecodeError(f"video {os.path.basename(path)!r} cannot be opened: {exc}") from exc
    try:
        for frame in reader:
            frames.append(frame)
            if len(frames) > max_frames:
                raise VideoTooLargeError(f"video has more than {max_frames} frames")
    except VideoDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001
        if not frames:
            raise VideoDecodeError(f"video cannot be decoded: {exc}") from exc
    finally:
        reader.close()
    if not frames:
        raise VideoDecodeError("video has no frames")
    return [
        resize_max_pixels(_to_rgb(frames[i]), max_pixels)
        for i in sample_indices(len(frames), nframes)
    ]


def read_video_bytes(
    data: bytes, *, nframes: int = 16, max_pixels: int = 200704, max_frames: int = 10000
) -> list[np.ndarray]:
    """Like `read_video_file` for an encoded video held in memory (written to a temp file)."""
    if not data:
        raise VideoDecodeError("video is empty")
    fd, path = tempfile.mkstemp(prefix="reward-video-", suffix=".mp4")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return read_video_file(path, nframes=nframes, max_pixels=max_pixels, max_frames=max_frames)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
