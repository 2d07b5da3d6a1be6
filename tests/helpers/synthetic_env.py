"""A small synthetic image env whose frames are painted with a scripted progress sequence.

Every pixel of frame ``t`` has grey level ``round(p_t * 255 / 100)``, so the reward service's mock
backend (*intensity* rule, docs/ARCHITECTURE.md) reads progress ``p_t`` back exactly, over JPEG
and HTTP. Tests can therefore predict every reward and termination of the wrappers.

Episode ``k`` (counted per env instance from 0) plays ``scripts[k % len(scripts)]``: frame 0 (the
reset frame) shows ``script[0]``, the frame after step ``t`` shows ``script[t]``; past the end of a
script the last value holds. ``success_at`` (per script, or one value for all) is the step at which
``info["is_success"]`` turns true; the env then terminates unless ``terminate_on_success=False``.

Import it from tests as ``tests.helpers.synthetic_env``:

    >>> from tests.helpers.synthetic_env import SyntheticProgressEnv, grey_level
    >>> env = SyntheticProgressEnv([[0, 10, 20, 30]], size=32)
    >>> obs, info = env.reset(seed=0)
    >>> bool(obs["agentview_image"][0, 0, 0] == grey_level(0))
    True
    >>> info["task_description"]
    'paint the frame'
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["SyntheticProgressEnv", "grey_level", "paint"]


def grey_level(progress: float) -> int:
    """The grey level that the intensity rule reads back as ``progress`` (0–100)."""
    return int(math.floor(float(progress) * 255.0 / 100.0 + 0.5))


def paint(progress: float, size: int = 32) -> np.ndarray:
    """A ``size``×``size`` RGB uint8 frame painted uniformly for ``progress``."""
    return np.full((size, size, 3), grey_level(progress), dtype=np.uint8)


class SyntheticProgressEnv(gym.Env):
    """Scripted-progress image env (LIBERO-like obs and info keys).

    Args:
        scripts: one or more progress sequences (values in 0–100), one per episode, cycling.
        size: frame side in pixels.
        camera: observation key of the painted frame (LIBERO's ``"agentview_image"``).
        task: ``info["task_description"]``.
        success_at: step at which the episode succeeds: one int/None for every script or a list
            with one entry per script.
        terminate_on_success: terminate on the success step (LIBERO's behaviour).
        step_delay_s: sleep this long in every ``step`` (to simulate a slow simulator).
        seed_selects_script: ``reset(seed=k)`` restarts the episode count at ``k`` (so the
            sub-envs of ``make_vec(...).reset(seed=0)``, seeded 0, 1, 2, ..., play different
            scripts).
        **ignored: accepted and ignored (``suite``, ``task_id``, … passed by ``make_env``).

    Example::

        env = SyntheticProgressEnv([[0, 50, 100]], success_at=2)
        env.reset()
        env.step(env.action_space.sample())[4]["is_success"]   # False
        env.step(env.action_space.sample())[2]                 # terminated: True
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        scripts: Sequence[Sequence[float]] | Sequence[float] = ((0.0,),),
        *,
        size: int = 32,
        camera: str = "agentview_image",
        task: str = "paint the frame",
        success_at: int | None | Sequence[int | None] = None,
        terminate_on_success: bool = True,
        step_delay_s: float = 0.0,
        seed_selects_script: bool = False,
        render_mode: str | None = "rgb_array",
        **ignored: Any,
    ) -> None:
        if len(scripts) and not isinstance(scripts[0], Sequence | np.ndarray):
            scripts = [scripts]  # a single flat script
        self.scripts = [[float(v) for v in s] for s in scripts]
        if not self.scripts or any(len(s) == 0 for s in self.scripts):
            raise ValueError("scripts must hold at least one non-empty progress sequence")
        if success_at is None or isinstance(success_at, int):
            self.success_at: list[int | None] = [success_at] * len(self.scripts)
        else:
            self.success_at = list(success_at)
            if len(self.success_at) != len(self.scripts):
                raise ValueError("success_at needs one entry per script")
        self.size = int(size)
        self.camera = camera
        self.task = task
        self.terminate_on_success = terminate_on_success
        self.step_delay_s = float(step_delay_s)
        self.seed_selects_script = seed_selects_script
        self.render_mode = render_mode
        image = spaces.Box(0, 255, shape=(self.size, self.size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(
            {camera: image, "state": spaces.Box(-np.inf, np.inf, (2,), np.float32)}
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(7,), dtype=np.float32)
        self.episode = -1
        self.t = 0
        self._frame: np.ndarray | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def script(self) -> list[float]:
        return self.scripts[self.episode % len(self.scripts)]

    def progress_at(self, t: int) -> float:
        """Painted progress of frame ``t`` of the current episode."""
        s = self.script
        return s[min(t, len(s) - 1)]

    def _obs(self) -> dict[str, np.ndarray]:
        self._frame = paint(self.progress_at(self.t), self.size)
        state = np.array([self.episode, self.t], dtype=np.float32)
        return {self.camera: self._frame, "state": state}

    def _info(self, success: bool) -> dict[str, Any]:
        return {
            "task_description": self.task,
            "is_success": success,
            "painted_progress": self.progress_at(self.t),
            "episode_index": self.episode,
        }

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and self.seed_selects_script:
            self.episode = int(seed) - 1
        self.episode += 1
        self.t = 0
        return self._obs(), self._info(False)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.episode < 0:
            raise RuntimeError("step() before reset()")
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)
        self.t += 1
        at = self.success_at[self.episode % len(self.scripts)]
        success = at is not None and self.t >= at
        terminated = bool(success and self.terminate_on_success)
        return self._obs(), float(success), terminated, False, self._info(success)

    def render(self) -> np.ndarray | None:
        return None if self._frame is None else self._frame.copy()
