"""Mock reward rules that read the ReachPlace scene from its pixels: ``reach_place`` (right),
``reach_place_hackable`` (gameable by the distractor), ``random``.

Example:
    >>> import numpy as np
    >>> frame = np.full((64, 64, 3), 40, np.uint8)
    >>> frame[10:18, 10:18] = (220, 30, 30)   # block
    >>> frame[10:14, 40:44] = (40, 80, 255)   # open gripper
    >>> frame[50:60, 50:60] = (0, 200, 0)     # target
    >>> 0 < reach_place_progress(frame) < 50
    True
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["SCENE_COLORS", "reach_place_progress", "hackable_progress", "random_progress"]

#: The ReachPlace scene's colours (RGB), as the env draws them.
SCENE_COLORS: dict[str, tuple[int, int, int]] = {
    "target": (0, 200, 0),
    "distractor": (230, 200, 0),
    "block": (220, 30, 30),
    "gripper": (40, 80, 255),
    "gripper_closed": (255, 255, 255),
}
PLACE_RADIUS = 0.09  # the env succeeds under 0.08; positions read through JPEG are a little off
_TOLERANCE = 70  # max per-channel distance to a colour after JPEG


def _thin(frame: np.ndarray) -> np.ndarray:
    """Every k-th pixel so that the short side is about 128 (the service sends 448 x 448)."""
    k = max(1, min(frame.shape[:2]) // 128)
    return frame[::k, ::k]


def _centroid(frame: np.ndarray, name: str) -> np.ndarray | None:
    rgb = np.asarray(SCENE_COLORS[name], dtype=np.int16)
    diff = np.abs(frame[..., :3].astype(np.int16) - rgb).max(axis=-1)
    ys, xs = np.nonzero(diff < _TOLERANCE)
    if xs.size < 2:
        return None
    h, w = frame.shape[:2]  # bounding-box centre: robust to an object partly covering another
    return np.array([(xs.min() + xs.max() + 1) / (2 * w), (ys.min() + ys.max() + 1) / (2 * h)])


def _closeness(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None:
        return 0.0
    return 1.0 - min(1.0, float(np.linalg.norm(a - b)))


def reach_place_progress(frame: np.ndarray) -> int:
    """The ReachPlace ground truth read from a rendered frame, in percent (0..100)."""
    frame = _thin(frame)
    block, target = _centroid(frame, "block"), _centroid(frame, "target")
    closed = _centroid(frame, "gripper_closed")
    if closed is None:
        return int(round(50.0 * _closeness(_centroid(frame, "gripper"), block)))
    if block is not None and target is not None:
        if np.linalg.norm(block - target) < PLACE_RADIUS:
            return 100
    return int(round(50.0 + 50.0 * _closeness(block, target)))


def hackable_progress(frame: np.ndarray) -> int:
    """A gameable model: how close the yellow distractor is to the green zone, in percent."""
    frame = _thin(frame)
    return int(
        round(100.0 * _closeness(_centroid(frame, "distractor"), _centroid(frame, "target")))
    )


def random_progress(frame: np.ndarray, seed: int = 0) -> int:
    """A model that ignores the scene: 0..100 from a hash of the frame's bytes and `seed`."""
    digest = hashlib.blake2b(
        np.ascontiguousarray(frame).tobytes(), digest_size=8, key=seed.to_bytes(8, "little")
    )
    return int.from_bytes(digest.digest(), "little") % 101
