"""Episode videos for people and trackers: MP4 files and animated GIFs from frame lists.

>>> import numpy as np
>>> frames = [np.full((8, 8, 3), v, np.uint8) for v in (0, 128, 255)]
>>> gif_bytes(frames)[:6]
b'GIF89a'
>>> pick_frame({"state": np.zeros(3), "image": frames[1]}).shape
(8, 8, 3)
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["VIDEO_EXTRA", "gif_bytes", "overlay_progress", "pick_frame", "write_mp4"]

#: The install line of the MP4 writer.
VIDEO_EXTRA = "pip install 'evolve-envs[video]'"


def pick_frame(obs: object, key: str | None = None) -> np.ndarray | None:
    """The camera image of one observation: ``obs[key]`` when given and present, else the first
    ``uint8`` ``(H, W, 3)`` array of a dict observation (or the observation itself); None when
    there is none."""

    def image(value: object) -> bool:
        arr = np.asarray(value) if isinstance(value, np.ndarray) else None
        return arr is not None and arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[-1] == 3

    if isinstance(obs, Mapping):
        if key is not None and key in obs and image(obs[key]):
            return np.asarray(obs[key])
        for value in obs.values():
            if image(value):
                return np.asarray(value)
        return None
    return np.asarray(obs) if image(obs) else None


def write_mp4(path: str | Path, frames: Sequence[np.ndarray], fps: int = 20) -> Path:
    """Write ``frames`` as an MP4 at ``path``; ``ImportError`` naming the extra without imageio."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the MP4 writer imageio uses)
    except ImportError as exc:
        raise ImportError(
            f"writing MP4 videos needs imageio and imageio-ffmpeg: {VIDEO_EXTRA}"
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(np.ascontiguousarray(frame, dtype=np.uint8))
    return path


def gif_bytes(frames: Sequence[np.ndarray], fps: int = 10, max_frames: int = 200) -> bytes:
    """An animated GIF of ``frames`` (every k-th frame when there are more than ``max_frames``,
    so a long episode stays a small image)."""
    from PIL import Image

    step = max(1, -(-len(frames) // max_frames))
    images = [Image.fromarray(np.ascontiguousarray(f, dtype=np.uint8)) for f in frames[::step]]
    if not images:
        raise ValueError("no frames to encode")
    buf = io.BytesIO()
    duration = max(20, round(1000 * step / fps))
    images[0].save(
        buf, format="GIF", save_all=True, append_images=images[1:], duration=duration, loop=0
    )
    return buf.getvalue()


def overlay_progress(
    frame: np.ndarray, progress: float, step: int, threshold: float | None, label: str = "progress"
) -> np.ndarray:
    """Draw a progress bar and ``t=<step>  <label>=<progress>`` text on a copy of ``frame``
    (``label`` names what the number is, e.g. ``pixel change`` for the mock's change rule)."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(img)
    w, h = img.size
    bar_h = max(4, h // 32)
    value = 0.0 if math.isnan(progress) else max(0.0, min(100.0, progress))
    draw.rectangle((0, h - bar_h, w - 1, h - 1), fill=(40, 40, 40))
    draw.rectangle((0, h - bar_h, int((w - 1) * value / 100), h - 1), fill=(60, 200, 90))
    if threshold is not None:
        x = int((w - 1) * threshold / 100)
        draw.line((x, h - bar_h, x, h - 1), fill=(230, 60, 60))
    text = f"t={step}  {label}={value:5.1f}"
    draw.rectangle((0, 0, min(w - 1, 7 * len(text)), 12), fill=(0, 0, 0))
    draw.text((2, 1), text, fill=(255, 255, 255))
    return np.asarray(img)
