"""Per-episode frame cache for the reward wrappers above it."""

from __future__ import annotations

from typing import SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.envs.libero_render import camera_frame
from evolve_envs.progress.frame_store import Encoding, FrameStore, uniform_indices

__all__ = ["FrameStore", "FrameCache", "find_frame_store", "uniform_indices"]


def find_frame_store(env: gym.Env) -> FrameStore | None:
    """The :class:`FrameStore` of the nearest :class:`FrameCache` in ``env``'s stack, if any."""
    current: gym.Env = env
    while current is not None:
        if isinstance(current, FrameCache):
            return current.frame_store
        current = getattr(current, "env", None)
    return None


class FrameCache(gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs):
    """Keep the current episode's frames of one camera for the wrappers above.

    >>> camera = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    >>> env = gym.wrappers.TransformObservation(  # CartPole, observed as one camera picture
    ...     gym.make("CartPole-v1"), lambda _: {"agentview_image": camera.sample()},
    ...     gym.spaces.Dict(agentview_image=camera))
    >>> env = FrameCache(env, encoding="raw", max_frames=4)
    >>> _ = env.reset(seed=0)
    >>> for _ in range(6):
    ...     _ = env.step(0)
    >>> env.frame_store.steps  # thinned past max_frames: first, latest and evenly in between
    [0, 2, 4, 6]
    >>> _ = env.reset(seed=1)
    >>> env.frame_store.steps, env.frame_store.episode_id
    ([0], 2)
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        camera: str | None = "agentview_image",
        *,
        encoding: Encoding = "jpeg",
        jpeg_quality: int = 90,
        max_frames: int = 1024,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, camera=camera, encoding=encoding, jpeg_quality=jpeg_quality, max_frames=max_frames
        )
        gym.Wrapper.__init__(self, env)
        self.camera = camera
        self.frame_store = FrameStore(encoding, jpeg_quality, max_frames)
        self.episode_step = 0

    def frame_of(self, obs: ObsType) -> np.ndarray:
        """The cached camera's frame in an observation of this env."""
        if self.camera is None:
            return np.asarray(obs)
        if not isinstance(obs, dict) or self.camera not in obs:
            keys = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise KeyError(f"FrameCache: observation has no camera key {self.camera!r} ({keys})")
        return camera_frame(self.env, obs, self.camera)  # drawn now by an env rendering on demand

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.frame_store.clear()
        self.episode_step = 0
        self.frame_store.add(0, self.frame_of(obs))
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_step += 1
        self.frame_store.add(self.episode_step, self.frame_of(obs))
        return obs, reward, terminated, truncated, info
