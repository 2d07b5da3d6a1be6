"""How camera frames are turned: MuJoCo's orientations, and turning frames from one to another.

>>> import numpy as np
>>> raw = np.arange(4).reshape(1, 2, 2, 1)
>>> reorient(raw, "raw", "rot180")[0, :, :, 0].tolist()
[[3, 2], [1, 0]]
"""

from __future__ import annotations

import numpy as np

__all__ = ["LEROBOT_LIBERO_ORIENTATION", "MUJOCO_ORIENTATIONS", "reorient"]

#: orientations relative to MuJoCo's raw render: (rows flipped, columns flipped)
MUJOCO_ORIENTATIONS: dict[str, tuple[bool, bool]] = {
    "raw": (False, False),
    "upright": (True, False),
    "rot180": (True, True),
}
#: the orientation of ``lerobot/libero``'s frames (LeRobot's ``LiberoProcessorStep`` turns the
#: simulator's frames so)
LEROBOT_LIBERO_ORIENTATION = "rot180"


def reorient(frames: np.ndarray, src: str, dst: str) -> np.ndarray:
    """``[..., H, W, 3]`` frames in MuJoCo orientation ``src`` turned to ``dst`` (a view).

    >>> raw = np.arange(4).reshape(1, 2, 2, 1)
    >>> bool((reorient(reorient(raw, "upright", "rot180"), "rot180", "upright") == raw).all())
    True
    """
    (rows_a, cols_a), (rows_b, cols_b) = MUJOCO_ORIENTATIONS[src], MUJOCO_ORIENTATIONS[dst]
    out = frames
    if rows_a != rows_b:
        out = out[..., ::-1, :, :]
    if cols_a != cols_b:
        out = out[..., :, ::-1, :]
    return out
