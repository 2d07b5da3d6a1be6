"""Frames the right way up: what orientation an RLinf env's images have, and turning them upright.

MuJoCo renders LIBERO's cameras upside down. Our LIBERO env hands reward models ``upright``
frames (``raw[::-1]``, :mod:`evolve_envs.envs.libero`). RLinf's LIBERO env
(``rlinf.envs.libero.libero_env.LiberoEnv``, 0.3.0 and ``main``) turns every camera image with
``img[::-1, ::-1]`` ("rotate 180 degrees to match train preprocessing", in
``rlinf.envs.libero.utils.get_libero_image``): its ``main_images`` are ``rot180`` frames, which
are the upright view mirrored left to right. A progress model trained on natural video would
judge a mirrored scene. :class:`~evolve_envs.integrations.rlinf.adapter.RLinfProgressReward`
therefore turns each frame upright before its tracker (and so the reward model) sees it:

* ``"auto"`` (the default): :func:`orientation_of` the env, i.e. ``"rot180"`` for an env from
  RLinf's LIBERO package, ``"upright"`` for any other;
* ``"upright"``: frames go as they come; ``"rot180"``: ``frame[:, ::-1]``; ``"raw"`` (as
  rendered): ``frame[::-1]``.

The policy still gets RLinf's frames unchanged: only the reward model's copy is turned.

Example:
    >>> import numpy as np
    >>> raw = np.arange(2 * 3).reshape(2, 3)[..., None]  # a 2 x 3 "image"
    >>> upright = raw[::-1]
    >>> rlinf = raw[::-1, ::-1]  # what RLinf's LIBERO env emits
    >>> bool((to_upright(rlinf, "rot180") == upright).all())
    True
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = ["FrameOrientation", "ORIENTATIONS", "orientation_of", "resolve", "to_upright"]

FrameOrientation = Literal["auto", "upright", "rot180", "raw"]
#: What an env's frames may be, and ``auto`` (decided from the env).
ORIENTATIONS = ("auto", "upright", "rot180", "raw")
#: Modules whose envs emit 180°-rotated frames (RLinf's LIBERO env, LIBERO-Plus/Pro included).
ROT180_MODULES = ("rlinf.envs.libero",)


def orientation_of(env: Any) -> str:
    """``"rot180"`` when ``env`` (or an env it wraps, through ``.env``) comes from RLinf's
    LIBERO package, else ``"upright"``.

    >>> orientation_of(object())
    'upright'
    """
    seen = 0
    while env is not None and seen < 16:
        module = type(env).__module__
        if any(module == m or module.startswith(m + ".") for m in ROT180_MODULES):
            return "rot180"
        env = getattr(env, "env", None)
        seen += 1
    return "upright"


def resolve(orientation: str, env: Any) -> str:
    """``orientation`` checked, with ``"auto"`` decided by :func:`orientation_of`.

    >>> resolve("raw", None)
    'raw'
    >>> resolve("sideways", None)
    Traceback (most recent call last):
    ...
    ValueError: frame_orientation must be one of auto, upright, rot180, raw; got 'sideways'
    """
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
