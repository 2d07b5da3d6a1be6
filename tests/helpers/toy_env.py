"""A tiny image env for the worker-mechanics tests, registered as ``DistrlToy-v0``.

A dot moves on a 16x16 frame (``image``) with 2-D actions; ``state`` is its position; reward is
minus the distance to the centre; episodes last ``length`` steps (truncated). ``step_delay_s``
sleeps in every step (a slow simulator), so per-worker speeds can differ through
``workers.env_overrides``. Workers reach it with ``env.id: tests.helpers.toy_env:DistrlToy-v0``.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "tests.helpers.toy_env:DistrlToy-v0"


class ToyEnv(gym.Env):
    """A dot on a 16x16 frame, pushed by 2-D actions."""

    def __init__(self, length: int = 8, step_delay_s: float = 0.0, size: int = 16) -> None:
        self.length, self.delay, self.size = length, step_delay_s, size
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (size, size, 3), np.uint8),
                "state": spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = np.zeros(2, np.float32)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        img = np.zeros((self.size, self.size, 3), np.uint8)
        r, c = ((self.pos + 1) / 2 * (self.size - 1)).round().astype(int)
        img[r, c] = 255
        return {"image": img, "state": self.pos.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {"task_description": "move the dot to the centre"}

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        a = np.clip(np.asarray(action, np.float32), -1, 1)
        self.pos = np.clip(self.pos + 0.2 * a, -1, 1).astype(np.float32)
        self.t += 1
        reward = -float(np.linalg.norm(self.pos))
        info = {"is_success": bool(np.linalg.norm(self.pos) < 0.1)}
        return self._obs(), reward, False, self.t >= self.length, info


gym.register("DistrlToy-v0", entry_point=ToyEnv, disable_env_checker=True)
