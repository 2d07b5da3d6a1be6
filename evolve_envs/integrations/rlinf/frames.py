"""Frames the right way up: the orientation of an RLinf env's images, and turning them upright.

RLinf's LIBERO env emits ``rot180`` frames (the upright view mirrored); the reward model gets
them upright (docs/rlinf.md); the policy keeps RLinf's frames.

    >>> import numpy as np
    >>> raw = np.arange(2 * 3).reshape(2, 3)[..., None]  # a 2 x 3 "image"
    >>> bool((to_upright(raw[::-1, ::-1], "rot180") == raw[::-1]).all())
    True
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["FrameOrientation", "ORIENTATIONS", "orientation_of", "resolve", "to_upright"]

FrameOrientation = Literal["auto", "upright", "rot180", "raw"]
#: What an env's frames may be, and ``auto`` (decided from the env).
ORIENTATIONS = ("auto", "upright", "rot180", "raw")
#: Modules whose envs emit 180°-rotated frames (RLinf's LIBERO env, LIBERO-Plus/Pro included).
ROT180_MODULES = ("rlinf.envs.libero",)


def orientation_of(env: object) -> str:
    """``"rot180"`` for an env (or one it wraps) from RLinf's LIBERO package, else ``"upright"``."""
    seen = 0
    while env is not None and seen < 16:
        module = type(env).__module__
        if any(module == m or module.startswith(m + ".") for m in ROT180_MODULES):
            return "rot180"
        env = getattr(env, "env", None)
        seen += 1
    return "upright"


def resolve(orientation: str, env: object) -> str:
    """``orientation`` checked (a ``ValueError`` names the choices), ``"auto"`` decided."""
    if orientation not in ORIENTATIONS:
        raise ValueError(
            f"frame_orientation must be one of {', '.join(ORIENTATIONS)}; got {orientation!r}"
        )
    return orientation_of(env) if orientation == "auto" else orientation


def to_upright(frame: np.ndarray, orientation: str) -> np.ndarray:
    """One ``H x W x C`` frame of the given orientation, turned upright (a view, no copy)."""
    if orientation == "rot180":
        return frame[:, ::-1]
    if orientation == "raw":
        return frame[::-1]
    return frame
