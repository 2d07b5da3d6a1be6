"""RecordEpisodes: write every episode (frames, actions, rewards, model progress) to disk.

Put it outermost, above the reward wrappers, so it sees their ``info``. Each episode is written
when it ends, in the format of :mod:`evolve_envs.recording.episodes` (Parquet + JPEG,
``docs/RECORDING.md``), so a reward model can be re-scored later (``evolve-envs calibrate``) without
simulating again. An episode cut short by ``close()`` or a new ``reset()`` is dropped, never
half-written. Frames are JPEG-encoded as they arrive, so an episode held until its end costs a few
KB per step.

Per step it keeps the frame of every camera (the reward camera's in ``frame``, every other
``HxWx3`` uint8 observation key in ``frame.<key>``), the action and the robot state
(``observation["state"]``) at full precision (float64), the stack's reward, ``info["env_reward"]``
(or the reward where the stack has none), the model's ``info["progress"]`` on check steps
(``info["progress_checked"]``), and the flags. Per episode: ``cameras`` (the reward camera first),
``orientation`` (per camera: the base env's ``image_orientation``, LIBERO's ``upright``,
``rot180`` or ``raw`` relative to MuJoCo's render, else ``as_rendered``), ``fps`` (the base env's
``render_fps``), ``task`` (the reset's
``info["task_description"]``), ``seed``, ``init_state_id``, ``env_id``/``suite``/``task_id`` where
the base env has them, ``init_sim_state`` (the base env's flattened simulator state right after
the reset, from its ``get_sim_state()`` where it has one: LIBERO's MuJoCo state, else null),
``return``, ``env_return``, ``success``, ``model_terminated`` (``info["done_by_progress"]``),
``final_progress`` and ``max_progress`` (percent) and the ``reward_model`` description given
here.

``info`` key added on the last step: ``recorded_episode`` (the episode's index line).

Example:
    >>> import tempfile, gymnasium as gym
    >>> from evolve_envs.envs.synthetic import ReachPlaceEnv
    >>> d = tempfile.mkdtemp()
    >>> env = RecordEpisodes(gym.wrappers.TimeLimit(ReachPlaceEnv(), 3), d, camera="image")
    >>> _ = env.reset(seed=0)
    >>> for _ in range(3):
    ...     *_, truncated, info = env.step(env.action_space.sample())
    >>> info["recorded_episode"]["length"], info["recorded_episode"]["seed"]
    (3, 0)
    >>> env.close()
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.recording.episodes import EpisodeWriter

__all__ = ["RecordEpisodes", "image_keys", "wrap_recording"]


class RecordEpisodes(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Records each finished episode into ``root`` (see the module docstring).

    Args:
        env: the env (with its reward wrappers) to record.
        root: the recording directory.
        camera: the observation key of the reward camera (its frames go in ``frame``).
        cameras: the observation keys of every camera to keep (default: every ``HxWx3`` uint8
            key of the observation space; the reward camera is always kept).
        state_key: the observation key of the robot state (kept where the observation has it).
        jpeg_quality: JPEG quality of the stored frames.
        reward_model: a description of the reward model stored with each episode.
        meta: extra fields for the recording's ``meta.json`` (e.g. the config).

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
        meta: Mapping[str, Any] | None = None,
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
        self._steps: list[dict[str, Any]] = []
        self._episode: dict[str, Any] = {}

    def _add_frames(self, obs: Any) -> None:
        """Append the JPEG of every camera's frame in ``obs``."""
        for key in self.cameras:
            frame = obs[key] if isinstance(obs, Mapping) else obs
            self._frames[key].append(self.writer.encode(np.asarray(frame, dtype=np.uint8)))

    def _state(self, obs: Any) -> np.ndarray | None:
        if self.state_key is None or not isinstance(obs, Mapping):
            return None
        return np.asarray(obs[self.state_key], dtype=np.float64).ravel()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
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

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
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

    def _write(self, info: Mapping[str, Any]) -> dict[str, Any]:
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


def _orientation(base: Any) -> str:
    """How the base env's frames are oriented (its ``image_orientation``, else as rendered)."""
    return str(getattr(base, "image_orientation", None) or "as_rendered")


def _fps(base: Any) -> float | None:
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
    layer: Any = env
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
    meta: Mapping[str, Any] | None = None,
) -> RecordEpisodes:
    """Record ``env``'s episodes into ``root``; the camera defaults to the observation's image.

    For code that builds envs itself (training workers): call it on the finished stack, so the
    recorder sees the reward wrappers' ``info``. Several envs and processes may share ``root``.
    ``reward_model`` (stored with each episode) defaults to the reward wrapper's name and its
    service URLs. Stacks built from a config get the same with a ``record: {dir: ...}`` block.

    Example:
        >>> import tempfile, gymnasium as gym
        >>> from evolve_envs.envs.synthetic import ReachPlaceEnv
        >>> env = wrap_recording(gym.wrappers.TimeLimit(ReachPlaceEnv(), 2), tempfile.mkdtemp())
        >>> env.camera
        'image'
        >>> env.close()
    """
    return RecordEpisodes(
        env,
        root,
        camera=camera or _guess_camera(env),
        cameras=cameras,
        jpeg_quality=jpeg_quality,
        reward_model=reward_model if reward_model is not None else _describe_reward_wrapper(env),
        meta=meta,
    )
