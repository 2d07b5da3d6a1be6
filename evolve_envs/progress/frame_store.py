"""Per-episode frame storage for reward models, without Gymnasium."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Literal

import numpy as np

try:  # libjpeg-turbo; Pillow is the fallback
    import simplejpeg
except ImportError:  # pragma: no cover - only where simplejpeg is missing
    simplejpeg = None

__all__ = ["Encoding", "FrameStore", "uniform_indices"]

Encoding = Literal["jpeg", "raw"]


def uniform_indices(n: int, k: int) -> list[int]:
    """``k`` indices spread uniformly over ``range(n)``, always including 0 and ``n - 1``."""
    if n <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k <= 1:
        return [n - 1]
    idx = np.linspace(0, n - 1, k).round().astype(int)
    return sorted(set(int(i) for i in idx))


def _encode(frame: np.ndarray, quality: int) -> bytes:
    image = np.ascontiguousarray(frame)
    if simplejpeg is not None:
        return simplejpeg.encode_jpeg(image, quality=quality, colorspace="RGB")
    from PIL import Image  # pragma: no cover

    buf = io.BytesIO()  # pragma: no cover
    Image.fromarray(image).save(buf, format="JPEG", quality=quality)  # pragma: no cover
    return buf.getvalue()  # pragma: no cover


def _decode(data: bytes) -> np.ndarray:
    if simplejpeg is not None:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    from PIL import Image  # pragma: no cover

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))  # pragma: no cover


class FrameStore:
    """Frames of one episode keyed by step index, compressed and bounded.

    >>> store = FrameStore(max_frames=4)
    >>> for t in range(10):
    ...     store.add(t, np.full((8, 8, 3), 10 * t, np.uint8))
    >>> store.steps                    # first, a uniform grid, latest
    [0, 4, 8, 9]
    >>> abs(int(store.get(9)[0, 0, 0]) - 90) <= 2   # JPEG keeps a flat frame within a level or two
    True
    """

    def __init__(
        self, encoding: Encoding = "jpeg", jpeg_quality: int = 90, max_frames: int = 1024
    ) -> None:
        if encoding not in ("jpeg", "raw"):
            raise ValueError(f"encoding must be 'jpeg' or 'raw', got {encoding!r}")
        if not 1 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality must be in [1, 100], got {jpeg_quality}")
        if int(max_frames) < 3:
            raise ValueError(f"max_frames must be >= 3, got {max_frames}")
        self.encoding: Encoding = encoding
        self.jpeg_quality = int(jpeg_quality)
        self.max_frames = int(max_frames)
        self.episode_id = 0
        self._steps: list[int] = []
        self._data: dict[int, bytes | np.ndarray] = {}
        self._stride = 1
        self._nbytes = 0

    # ------------------------------------------------------------------ writing
    def clear(self) -> None:
        """Forget every frame and start a new episode (``episode_id`` increases by one)."""
        self._steps.clear()
        self._data.clear()
        self._stride = 1
        self._nbytes = 0
        self.episode_id += 1

    def add(self, step: int, frame: np.ndarray) -> None:
        """Store ``frame`` as the frame of episode step ``step`` (steps must increase)."""
        step = int(step)
        if self._steps and step <= self._steps[-1]:
            raise ValueError(
                f"frame steps must increase within an episode: got step {step} after "
                f"{self._steps[-1]} (call clear() when a new episode starts)"
            )
        frame = np.asarray(frame)
        if self._steps and len(self._steps) > 1 and not self._on_grid(self._steps[-1]):
            self._drop(self._steps[-1])  # kept only because it was the latest frame
        self._put(step, frame)
        while len(self._steps) > self.max_frames:
            self._stride *= 2
            for s in list(self._steps[1:-1]):
                if not self._on_grid(s):
                    self._drop(s)

    def _on_grid(self, step: int) -> bool:
        return (step - self._steps[0]) % self._stride == 0

    def _put(self, step: int, frame: np.ndarray) -> None:
        jpeg_ok = frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
        data: bytes | np.ndarray
        if self.encoding == "jpeg" and jpeg_ok:
            data = _encode(frame, self.jpeg_quality)
            self._nbytes += len(data)
        else:
            data = np.array(frame, copy=True)
            self._nbytes += data.nbytes
        self._steps.append(step)
        self._data[step] = data

    def _drop(self, step: int) -> None:
        data = self._data.pop(step)
        self._nbytes -= len(data) if isinstance(data, bytes) else data.nbytes
        self._steps.remove(step)

    # ------------------------------------------------------------------ reading
    @property
    def steps(self) -> list[int]:
        """Step indices held, increasing."""
        return list(self._steps)

    @property
    def stride(self) -> int:
        """Current thinning stride (1 until the store first overflowed)."""
        return self._stride

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored frames."""
        return self._nbytes

    @property
    def last_step(self) -> int | None:
        return self._steps[-1] if self._steps else None

    def __len__(self) -> int:
        return len(self._steps)

    def __contains__(self, step: object) -> bool:
        return step in self._data

    def get(self, step: int) -> np.ndarray:
        """The frame of ``step`` (decoded); ``KeyError`` naming the held range if not held."""
        try:
            data = self._data[int(step)]
        except KeyError:
            held = f"{self._steps[0]}..{self._steps[-1]}" if self._steps else "none"
            raise KeyError(
                f"no frame for step {step} in episode {self.episode_id} "
                f"(held steps {held}, stride {self._stride})"
            ) from None
        return _decode(data) if isinstance(data, bytes) else data.copy()

    def frames(self, steps: Sequence[int] | None = None) -> list[np.ndarray]:
        """Decoded frames for ``steps`` (default: all held), in the given order."""
        return [self.get(s) for s in (self._steps if steps is None else steps)]

    def sample(self, k: int) -> tuple[list[int], list[np.ndarray]]:
        """Up to ``k`` held frames spread uniformly over the episode (first and latest included)."""
        chosen = [self._steps[i] for i in uniform_indices(len(self._steps), k)]
        return chosen, self.frames(chosen)
