"""Converting a recording (:mod:`evolve_envs.recording.episodes`) into a LeRobotDataset v3.

>>> import json, tempfile, gymnasium as gym
>>> from evolve_envs.envs.synthetic import ReachPlaceEnv
>>> from evolve_envs.wrappers.record_episodes import RecordEpisodes
>>> rec = tempfile.mkdtemp()
>>> env = RecordEpisodes(gym.wrappers.TimeLimit(ReachPlaceEnv(), 5), rec, camera="image")
>>> for seed in (0, 1):
...     _ = env.reset(seed=seed)
...     for _ in range(5):
...         _ = env.step(env.action_space.sample())
>>> out = export_lerobot(rec, tempfile.mkdtemp() + "/ds", codec="lossless")
>>> info = json.load(open(out / "meta/info.json"))
>>> info["total_frames"], info["fps"], sorted(info["features"])[:4]
(12, 10, ['action', 'episode_index', 'frame_index', 'index'])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from evolve_envs.recording.episodes import RecordedEpisode, Recording
from evolve_envs.recording.lerobot_v3 import LeRobotWriter
from evolve_envs.recording.orientation import (
    LEROBOT_LIBERO_ORIENTATION,
    MUJOCO_ORIENTATIONS,
    reorient,
)

__all__ = ["LIBERO_CAMERAS", "export_lerobot", "feature_key"]

#: LIBERO's observation keys -> LeRobot's camera names (``lerobot/libero``, LeRobot's LIBERO env)
LIBERO_CAMERAS = {"agentview_image": "image", "wrist_image": "image2"}
LIBERO_STATE_NAMES = ["eef_x", "eef_y", "eef_z", "eef_axis_angle_x", "eef_axis_angle_y",
                      "eef_axis_angle_z", "gripper_qpos_0", "gripper_qpos_1"]  # fmt: skip
LIBERO_ACTION_NAMES = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]
PREFIX = "reward_model.run."


def feature_key(observation_key: str, libero: bool) -> str:
    """The dataset's name of a camera: ``observation.images.<name>``.

    >>> feature_key("agentview_image", True), feature_key("image", False)
    ('observation.images.image', 'observation.images.image')
    """
    if libero and observation_key in LIBERO_CAMERAS:
        return f"observation.images.{LIBERO_CAMERAS[observation_key]}"
    name = observation_key.removesuffix("_image") or observation_key
    return f"observation.images.{name}"


def _held(progress: list[object]) -> np.ndarray:
    """Progress per row: the last check's value, 0 before the first."""
    out, value = [], 0.0
    for p in progress:
        value = float(p) if p is not None else value
        out.append(value)
    return np.asarray(out, np.float32)


def _episode_columns(
    ep: RecordedEpisode, with_state: bool, with_model: bool, keep_final: bool
) -> dict[str, object]:
    table = ep.table()
    col = {
        name: table.column(name).to_pylist()
        for name in table.column_names
        if name != "frame" and not name.startswith("frame.")
    }
    n = len(ep) + 1 if keep_final else len(ep)  # frames
    last = len(ep)

    def outcome(name: str, pad: Any) -> list[object]:  # row t + 1's value at frame t
        values = col[name][1 : last + 1]
        return values + [pad(values)] if keep_final else values

    data: dict[str, object] = {}
    if with_state:
        data["observation.state"] = np.asarray(col["state"][:n], np.float32)
    data["action"] = np.asarray(outcome("action", lambda v: v[-1]), np.float32)
    data["next.reward"] = np.asarray(outcome("env_reward", lambda v: 0.0), np.float32)
    terminated = np.asarray(outcome("terminated", lambda v: v[-1]), bool)
    truncated = np.asarray(outcome("truncated", lambda v: v[-1]), bool)
    data["next.done"] = terminated | truncated
    data["next.truncated"] = truncated
    data["next.success"] = np.asarray(outcome("is_success", lambda v: v[-1]), bool)
    if with_model:
        data[PREFIX + "reward"] = np.asarray(outcome("reward", lambda v: 0.0), np.float32)
        data[PREFIX + "progress"] = _held(col["model_progress"])[:n]
        data[PREFIX + "is_check"] = np.asarray(col["is_check"][:n], bool)
    return data


def _scalar(dtype: str) -> dict[str, object]:
    return {"dtype": dtype, "shape": [1], "names": None}


def export_lerobot(
    recording: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    codec: str = "av1",
    fps: int | None = None,
    orientation: str = "lerobot",
    task: str | None = None,
    final_frame: str = "keep",
) -> Path:
    """Write the recording's episodes as a LeRobotDataset v3 in ``out`` (a new folder)."""
    if orientation not in ("lerobot", "as_recorded"):
        raise ValueError(f"orientation must be 'lerobot' or 'as_recorded', got {orientation!r}")
    if final_frame not in ("keep", "drop"):
        raise ValueError(f"final_frame must be 'keep' or 'drop', got {final_frame!r}")
    keep = final_frame == "keep"
    rec = Recording(recording)
    episodes = [ep for ep in rec if len(ep) > 0]
    if not episodes:
        raise ValueError(f"{recording}: no recorded episode with a step to export")
    first = episodes[0]
    cameras = first.cameras
    for ep in episodes:
        if ep.cameras != cameras:
            raise ValueError(
                f"episode {ep.meta.get('episode_id')} has cameras {ep.cameras}, the first "
                f"{cameras}: a LeRobot dataset has one set of cameras"
            )
    rates = {ep.meta.get("fps") for ep in episodes}
    if fps is None:
        if len(rates) != 1 or None in rates:
            raise ValueError(
                f"{recording}: the episodes' frame rates are {sorted(map(str, rates))}; "
                "give one with --fps"
            )
        fps = int(round(float(rates.pop())))
    libero = first.meta.get("suite") is not None
    with_state = all(s is not None for ep in episodes for s in ep.column("state"))
    with_model = any(ep.meta.get("reward_model") or any(ep.column("is_check")) for ep in episodes)
    state_dim = len(first.column("state")[0]) if with_state else 0
    action_dim = len(first.column("action")[1])
    features: dict[str, dict[str, object]] = {}
    extra: dict[str, dict[str, object]] = {}
    turn: dict[str, tuple[str, str] | None] = {}
    shapes = {cam: first.frames([0], camera=cam).shape[1:] for cam in cameras}
    for cam in cameras:
        key = feature_key(cam, libero)
        src = str((first.meta.get("orientation") or {}).get(cam, "as_rendered"))
        dst = src
        if orientation == "lerobot" and src in MUJOCO_ORIENTATIONS:
            dst = LEROBOT_LIBERO_ORIENTATION
        turn[cam] = (src, dst) if dst != src else None
        features[key] = {
            "dtype": "video",
            "shape": list(shapes[cam]),
            "names": ["height", "width", "channels"],
        }
        extra[key] = {
            "image_orientation": dst,
            "observation_key": cam,
            "reward_camera": cam == cameras[0],
        }
    if with_state:
        names = LIBERO_STATE_NAMES if libero and state_dim == 8 else None
        features["observation.state"] = {"dtype": "float32", "shape": [state_dim], "names": names}
    names = LIBERO_ACTION_NAMES if libero and action_dim == 7 else None
    features["action"] = {"dtype": "float32", "shape": [action_dim], "names": names}
    features["next.reward"] = _scalar("float32")
    for flag in ("next.done", "next.truncated", "next.success"):
        features[flag] = _scalar("bool")
    if with_model:
        features[PREFIX + "reward"] = _scalar("float32")
        features[PREFIX + "progress"] = _scalar("float32")
        features[PREFIX + "is_check"] = _scalar("bool")
    writer = LeRobotWriter(
        out,
        fps=fps,
        features=features,
        codec=codec,
        video_info_extra=extra,
        robot_type="panda" if libero else None,
    )
    with writer:
        for ep in episodes:
            instruction = str(ep.meta.get("task") or task or "")
            if not instruction.strip():
                raise ValueError(
                    f"episode {ep.meta.get('episode_id')} of {recording} has no task "
                    "(instruction); a LeRobot dataset needs one: give it with --task"
                )
            videos = {}
            for cam in cameras:
                frames = ep.frames(range(len(ep) + keep), camera=cam)
                if frames.shape[1:] != shapes[cam]:
                    raise ValueError(
                        f"episode {ep.meta.get('episode_id')}: camera {cam} frames are "
                        f"{frames.shape[1:]}, the first episode's {shapes[cam]}"
                    )
                pair = turn[cam]
                videos[feature_key(cam, libero)] = (
                    frames if pair is None else reorient(frames, *pair)
                )
            columns = _episode_columns(ep, with_state, with_model, keep)
            writer.add_episode(instruction, columns, videos)
    return Path(out)
