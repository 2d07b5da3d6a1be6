"""LIBERO's suites and tasks: the suite tables, loading a suite, finding a task by id or name.

>>> default_max_episode_steps("libero_10")
520
>>> check_cameras("wrist")
('wrist',)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from evolve_envs.envs.libero_process import raise_setup_error, stdout_to_log

__all__ = [
    "ACTION_DIM",
    "CAMERAS",
    "MAX_EPISODE_STEPS",
    "STATE_DIM",
    "SUITES",
    "ImageOrientation",
    "InitStateMode",
    "check_cameras",
    "check_image_size",
    "check_init_state",
    "check_init_state_ids",
    "check_suite",
    "default_max_episode_steps",
    "load_suite",
    "resolve_task",
]

SUITES: tuple[str, ...] = (
    "libero_10",
    "libero_spatial",
    "libero_object",
    "libero_goal",
    "libero_90",
)

#: Max episode steps per suite, as used by OpenVLA / LeRobot evaluations.
MAX_EPISODE_STEPS: dict[str, int] = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}

#: Camera aliases → robosuite camera names. Observation keys are ``f"{alias}_image"``.
CAMERAS: dict[str, str] = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}

ImageOrientation = Literal["upright", "rot180", "raw"]
InitStateMode = Literal["random", "ordered", "by_seed"]

ACTION_DIM = 7
STATE_DIM = 8  # eef position (3) + eef axis-angle (3) + gripper finger positions (2)


def default_max_episode_steps(suite: str) -> int:
    """The max episode steps for ``suite`` (raises ``ValueError`` for an unknown suite)."""
    check_suite(suite)
    return MAX_EPISODE_STEPS[suite]


def check_suite(suite: str) -> None:
    if suite not in SUITES:
        raise ValueError(f"unknown LIBERO suite {suite!r}; valid suites: {', '.join(SUITES)}")


def check_cameras(cameras: Sequence[str]) -> tuple[str, ...]:
    if isinstance(cameras, str):
        cameras = (cameras,)
    cams = tuple(cameras)
    bad = [c for c in cams if c not in CAMERAS]
    if not cams or bad or len(set(cams)) != len(cams):
        raise ValueError(
            f"cameras must be a non-empty subset of {tuple(CAMERAS)} without repeats, got {cams}"
        )
    return cams


def check_image_size(size: int | Sequence[int]) -> tuple[int, int]:
    hw = (size, size) if isinstance(size, int | np.integer) else tuple(size)
    if len(hw) != 2 or not all(isinstance(v, int | np.integer) and 16 <= v <= 2048 for v in hw):
        raise ValueError(
            f"image_size must be an int or (height, width) in [16, 2048], got {size!r}"
        )
    return int(hw[0]), int(hw[1])


def check_init_state(init_state: InitStateMode | int) -> InitStateMode | int:
    if init_state in ("random", "ordered", "by_seed"):
        return init_state
    if isinstance(init_state, int | np.integer) and not isinstance(init_state, bool):
        if init_state < 0:
            raise ValueError(f"init_state id must be >= 0, got {init_state}")
        return int(init_state)
    raise ValueError(
        f"init_state must be 'random', 'ordered', 'by_seed' or an int id, got {init_state!r}"
    )


def check_init_state_ids(ids: Sequence[int] | None) -> tuple[int, ...] | None:
    """The init-state ids an env plays (``None``: all of the task's), checked for shape.

    >>> check_init_state_ids(range(10, 13))
    (10, 11, 12)
    """
    if ids is None:
        return None
    out = tuple(ids)
    if not out or not all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in out):
        raise ValueError(f"init_state_ids must be a non-empty list of ints, got {ids!r}")
    if min(out) < 0 or len(set(out)) != len(out):
        raise ValueError(f"init_state_ids must be distinct ids >= 0, got {list(out)}")
    return tuple(int(i) for i in out)


def load_suite(suite: str) -> Any:
    try:
        with stdout_to_log():
            from libero.libero import benchmark
    except Exception as exc:
        raise_setup_error(exc)
    with stdout_to_log():
        return benchmark.get_benchmark_dict()[suite]()


def resolve_task(bench: Any, task_id: int | str, suite: str) -> int:
    names: list[str] = list(bench.get_task_names())
    if isinstance(task_id, int | np.integer) and not isinstance(task_id, bool):
        if 0 <= int(task_id) < len(names):
            return int(task_id)
    elif isinstance(task_id, str):
        if task_id in names:
            return names.index(task_id)
        languages = [bench.get_task(i).language for i in range(len(names))]
        if task_id in languages:
            return languages.index(task_id)
    listing = "\n".join(f"  {i}: {n}" for i, n in enumerate(names))
    raise ValueError(
        f"unknown task {task_id!r} in suite {suite!r}; valid task ids and names:\n{listing}"
    )
