"""RecordEpisodes: write every episode (frames, actions, rewards, model progress) to disk."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.envs.libero_render import camera_frame
from evolve_envs.recording.episodes import EpisodeWriter

__all__ = ["RECORD_META", "RecordEpisodes", "image_keys", "wrap_recording"]

#: ``reset`` option whose mapping is added to the recorded episode's index line.
RECORD_META = "record_meta"


class RecordEpisodes(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Records each finished episode into ``root`` (docs/wrappers.md).

    >>> import tempfile
    >>> from evolve_envs.recording.episodes import open_recording
    >>> picture = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    >>> env = gym.wrappers.TransformObservation(  # CartPole, observed as a picture
    ...     gym.make("CartPole-v1", max_episode_steps=2), lambda _: picture.sample(), picture)
    >>> root = tempfile.mkdtemp()
    >>> env = RecordEpisodes(env, root, camera="image", reward_model="none")
    >>> _ = env.reset(seed=0)
    >>> for _ in range(2):
    ...     info = env.step(0)[-1]
    >>> line = info["recorded_episode"]
    >>> line["length"], line["return"], line["reward_model"], len(open_recording(root))
    (2, 2.0, 'none', 1)
    >>> env.close()
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        root: str | os.PathLike[str],
        *,
        camera: str = "agentview_image",
        cameras: Sequence[str] | None = None,
        state_key: str = "state",
        jpeg_quality: int = 90,
        reward_model: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            root=str(root),
            camera=camera,
            cameras=cameras,
            state_key=state_key,
            jpeg_quality=jpeg_quality,
            reward_model=reward_model,
        )
        gym.Wrapper.__init__(self, env)
        space = env.observation_space
        keys = list(space.spaces) if isinstance(space, gym.spaces.Dict) else []
        for key in [camera, *(cameras or ())]:
            if keys and key not in keys:
                raise ValueError(
                    f"camera {key!r} is not an observation key (available: {', '.join(keys)})"
                )
        self.camera = camera
        wanted = image_keys(env) if cameras is None else list(cameras)
        self.cameras = [camera, *(k for k in dict.fromkeys(wanted) if k != camera)]
        self.state_key = state_key if state_key in keys else None
        self.reward_model = reward_model
        self.writer = EpisodeWriter(root, jpeg_quality=jpeg_quality, meta=meta)
        self._frames: dict[str, list[bytes]] = {}  # JPEG: KB per step in memory, not raw
        self._steps: list[dict[str, object]] = []
        self._episode: dict[str, object] = {}

    def _add_frames(self, obs: ObsType) -> None:
        """Append the JPEG of every camera's frame in ``obs``."""
        for key in self.cameras:
            frame = camera_frame(self.env, obs, key) if isinstance(obs, Mapping) else obs
            self._frames[key].append(self.writer.encode(np.asarray(frame, dtype=np.uint8)))

    def _state(self, obs: ObsType) -> np.ndarray | None:
        if self.state_key is None or not isinstance(obs, Mapping):
            return None
        return np.asarray(obs[self.state_key], dtype=np.float64).ravel()

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        # ``options["record_meta"]``: keys this wrapper adds to the episode's index line (the env
        # below never sees them), e.g. the scripted behaviour that played it
        options = dict(options or {})
        extra = dict(options.pop(RECORD_META, None) or {})
        obs, info = self.env.reset(seed=seed, options=options or None)
        base = self.env.unwrapped
        init_state_id = info.get("init_state_id")
        if init_state_id is None:
            init_state_id = (options or {}).get(
                "init_state_id", getattr(base, "init_state_id", None)
            )
        spec = getattr(base, "spec", None)
        get_sim_state = getattr(base, "get_sim_state", None)
        init_sim_state = (
            np.asarray(get_sim_state(), dtype=np.float64).ravel().tolist()
            if callable(get_sim_state)
            else None
        )
        self._episode = {
            "task": str(info.get("task_description", "")),
            "seed": seed,
            "init_state_id": None if init_state_id is None else int(init_state_id),
            "init_sim_state": init_sim_state,
            "env_id": getattr(spec, "id", None),
            "suite": getattr(base, "suite", None),
            "task_id": getattr(base, "task_id", None),
            "camera": self.camera,
            "orientation": {key: _orientation(base) for key in self.cameras},
            "fps": _fps(base),
            "reward_model": self.reward_model,
            **extra,
        }
        self._frames = {key: [] for key in self.cameras}
        self._add_frames(obs)
        self._steps = [
            {
                "action": None,
                "state": self._state(obs),
                "reward": None,
                "env_reward": None,
                "model_progress": None,
                "is_check": False,
                "terminated": False,
                "truncated": False,
                "is_success": bool(info.get("is_success", False)),
            }
        ]
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self._steps:  # stepping without a reset through this wrapper: nothing to record
            return obs, reward, terminated, truncated, info
        checked = bool(info.get("progress_checked", False))
        progress = info.get("progress") if checked else None
        self._add_frames(obs)
        self._steps.append(
            {
                "action": np.asarray(action, dtype=np.float64).ravel(),
                "state": self._state(obs),
                "reward": float(reward),
                "env_reward": float(info.get("env_reward", reward)),
                "model_progress": None if progress is None else float(progress),
                "is_check": checked,
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "is_success": bool(info.get("is_success", False)),
            }
        )
        if terminated or truncated:
            info = dict(info)
            info["recorded_episode"] = self._write(info)
        return obs, reward, terminated, truncated, info

    def _write(self, info: Mapping[str, object]) -> dict[str, object]:
        steps = self._steps[1:]
        summary = info.get("episode_reward_model") or {}
        meta = {
            **self._episode,
            "return": float(sum(s["reward"] for s in steps)),
            "env_return": float(sum(s["env_reward"] for s in steps)),
            "success": any(s["is_success"] for s in steps),
            "terminated": steps[-1]["terminated"],
            "truncated": steps[-1]["truncated"],
            "model_terminated": bool(info.get("done_by_progress", False)),
            "final_progress": summary.get("progress"),
            "max_progress": summary.get("max_progress"),
        }
        others = {key: self._frames[key] for key in self.cameras[1:]}
        line = self.writer.write(self._frames[self.camera], self._steps, meta, camera_frames=others)
        self._frames, self._steps = {}, []
        return line

    def close(self) -> None:
        self._frames, self._steps = {}, []
        super().close()


def _orientation(base: gym.Env) -> str:
    """How the base env's frames are oriented (its ``image_orientation``, else as rendered)."""
    return str(getattr(base, "image_orientation", None) or "as_rendered")


def _fps(base: gym.Env) -> float | None:
    fps = (getattr(base, "metadata", None) or {}).get("render_fps")
    return None if fps is None else float(fps)


def image_keys(env: gym.Env) -> list[str]:
    """The observation keys of ``env`` that hold ``HxWx3`` uint8 frames (its cameras)."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        return []
    return [
        key
        for key, sub in space.spaces.items()
        if isinstance(sub, gym.spaces.Box)
        and sub.dtype == np.uint8
        and len(sub.shape) == 3
        and sub.shape[-1] == 3
    ]


def _guess_camera(env: gym.Env) -> str:
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        return "image"  # not read: a non-dict observation is the frame itself
    images = image_keys(env)
    for preferred in ("agentview_image", "image"):
        if preferred in images:
            return preferred
    if not images:
        raise ValueError(
            "no HxWx3 uint8 image in the observation space; pass camera= "
            f"(keys: {', '.join(space.spaces)})"
        )
    return images[0]


def _describe_reward_wrapper(env: gym.Env) -> str | None:
    """``"<reward wrapper>: <endpoint URLs>"`` of the first wrapper in the stack with a client."""
    layer: gym.Env = env
    while layer is not None:
        urls = getattr(getattr(getattr(layer, "client", None), "pool", None), "urls", None)
        if urls:
            return f"{type(layer).__name__}: {', '.join(map(str, urls))}"
        layer = getattr(layer, "env", None)
    return None


def wrap_recording(
    env: gym.Env,
    root: str | os.PathLike[str],
    *,
    camera: str | None = None,
    cameras: Sequence[str] | None = None,
    jpeg_quality: int = 90,
    reward_model: str | None = None,
    meta: Mapping[str, object] | None = None,
) -> RecordEpisodes:
    """Record ``env``'s episodes into ``root``; the camera defaults to the observation's image."""
    return RecordEpisodes(
        env,
        root,
        camera=camera or _guess_camera(env),
        cameras=cameras,
        jpeg_quality=jpeg_quality,
        reward_model=reward_model if reward_model is not None else _describe_reward_wrapper(env),
        meta=meta,
    )
