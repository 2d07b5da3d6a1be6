"""LiberoEnv's ``render_cameras``: frames drawn only when read equal those drawn every step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.envs.libero import LiberoEnv
from evolve_envs.envs.libero_render import camera_frame, check_render_cameras
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

KEYS = ("agentview_image", "wrist_image")
KEYS_ALIASES = ("agentview", "wrist")
ACTIONS = np.random.default_rng(0).uniform(-1, 1, (8, 7))


def test_render_cameras_is_checked() -> None:
    assert check_render_cameras("always", ("agentview", "wrist")) == ("agentview", "wrist")
    assert check_render_cameras(["wrist", "agentview"], ("agentview", "wrist")) == (
        "agentview",
        "wrist",
    )
    with pytest.raises(ValueError, match="'sometimes'"):
        check_render_cameras("sometimes", ("agentview",))
    with pytest.raises(ValueError, match="not one of this env's cameras"):
        LiberoEnv(cameras=("agentview",), render_cameras=["wrist"])


def test_camera_frame_reads_the_observation_of_other_envs() -> None:
    env = gym.make("CartPole-v1")
    frame = np.ones((2, 2, 3), np.uint8)
    assert camera_frame(env, {"cam": frame}, "cam") is frame
    env.close()


@pytest.fixture()
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every camera frame drawn (robosuite's sensors and the on-demand path alike)."""
    import mujoco

    drawn: list[int] = []
    draw = mujoco.mjr_render

    def counting(*args: Any, **kwargs: Any) -> None:
        drawn.append(1)
        draw(*args, **kwargs)

    monkeypatch.setattr(mujoco, "mjr_render", counting)
    return drawn


@pytest.fixture()
def env(libero_env: LiberoEnv) -> Iterator[LiberoEnv]:
    """The session's env, put back to rendering every camera at every step afterwards."""
    try:
        yield libero_env
    finally:
        libero_env.render_cameras = "always"
        libero_env.reset(seed=0)


def _run(env: LiberoEnv, mode: Any, read: set[int]) -> list[tuple[dict, dict]]:
    """Reset (seed 0) under ``mode``, step ACTIONS, read both cameras at the steps in ``read``."""
    env.render_cameras = mode
    env.reset(seed=0)
    out = []
    for k, action in enumerate(ACTIONS):
        obs, _, _, _, info = env.step(action)
        if k in read:
            for key in KEYS:
                env.frame(key)
        out.append(({key: value.copy() for key, value in obs.items()}, info))
    return out


@pytest.mark.libero
def test_frames_read_on_demand_equal_those_rendered_at_every_step(env: LiberoEnv) -> None:
    always = _run(env, "always", set())
    on_demand = _run(env, "on_demand", {2, 5})
    for k, ((obs_a, info_a), (obs_d, info_d)) in enumerate(zip(always, on_demand, strict=True)):
        assert np.array_equal(obs_a["state"], obs_d["state"])
        assert info_a["rendered_cameras"] == list(KEYS)
        if k in (2, 5):
            assert info_d["rendered_cameras"] == list(KEYS)
            for key in KEYS:
                assert obs_a[key].max() > 0 and np.array_equal(obs_a[key], obs_d[key]), (k, key)
        else:
            assert info_d["rendered_cameras"] == []
            assert all(not obs_d[key].any() for key in KEYS)
    # the policy's camera at every step, the other one never read
    wrist = _run(env, ["wrist"], set())
    for (obs_a, _), (obs_w, info_w) in zip(always, wrist, strict=True):
        assert info_w["rendered_cameras"] == ["wrist_image"]
        assert np.array_equal(obs_a["wrist_image"], obs_w["wrist_image"])
        assert not obs_w["agentview_image"].any()


@pytest.mark.libero
def test_nothing_is_drawn_at_steps_nobody_reads(env: LiberoEnv, renders: list[int]) -> None:
    env.render_cameras = "on_demand"
    env.reset(seed=0)  # installs the captures
    renders.clear()
    obs, info = env.reset(seed=0)
    assert renders == [] and info["rendered_cameras"] == []
    assert env.on_demand_keys == frozenset(KEYS)
    for action in ACTIONS[:3]:
        obs, *_, info = env.step(action)
    assert renders == []
    frame = env.frame("agentview_image")
    assert len(renders) == 1 and frame is obs["agentview_image"] and frame.any()
    assert env.frame("agentview_image") is frame and env.render() is frame
    assert len(renders) == 1 and info["rendered_cameras"] == ["agentview_image"]
    with pytest.raises(KeyError, match="not an image key"):
        env.frame("state")
    env.render_cameras = "always"
    renders.clear()
    env.reset(seed=0)
    env.step(ACTIONS[0])
    assert env.on_demand_keys == frozenset() and len(renders) >= 2  # both cameras again


@pytest.mark.libero
def test_observations_stay_in_the_space(env: LiberoEnv) -> None:
    from gymnasium.utils.env_checker import check_env

    env.render_cameras = "on_demand"
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, *_ = env.step(ACTIONS[0])
    assert env.observation_space.contains(obs)
    env.frame("wrist_image")
    assert env.observation_space.contains(obs)


def _checked_frames(env: LiberoEnv, url: str, mode: Any) -> tuple[dict, list[float]]:
    """The frames a ProgressReward check kept, and the progress after each step, under ``mode``."""
    from evolve_envs import open_reward_model
    from evolve_envs.wrappers.progress_reward import ProgressReward

    env.render_cameras = mode
    model = open_reward_model(
        {"enable": True, "endpoint": url, "start_step": 2, "call_every": 3, "milestone_every": 3}
    )
    wrapped = ProgressReward(gym.wrappers.TimeLimit(env, 7), model)
    try:
        wrapped.reset(seed=0)
        progress = [wrapped.step(a)[4]["progress"] for a in ACTIONS[:7]]
        kept = {step: frame.copy() for step, frame in wrapped.tracker.kept_frames.items()}
    finally:
        model.close()  # the session's env stays open
    return kept, progress


@pytest.mark.libero
def test_the_reward_checks_get_fresh_frames(
    env: LiberoEnv, intensity_service: EmbeddedService
) -> None:
    always, progress_always = _checked_frames(env, intensity_service.url, "always")
    on_demand, progress_on_demand = _checked_frames(env, intensity_service.url, "on_demand")
    assert sorted(always) == sorted(on_demand) and max(always) > 0  # the reset and the checks
    for step, frame in always.items():
        assert frame.any() and np.array_equal(frame, on_demand[step]), step
    assert progress_on_demand == progress_always


@pytest.mark.libero
def test_a_stack_config_says_it() -> None:
    """``env.render_cameras`` in a stack config reaches the env (nothing is built: no simulator)."""
    from evolve_envs import ConfigError, make_env

    for value, every_step in (("on_demand", ()), (["wrist"], ("wrist",)), ("always", KEYS_ALIASES)):
        config = {"env": {"suite": "libero_object", "render_cameras": value}}
        env = make_env([config, {"reward_model": {"enable": False}}])
        assert env.unwrapped.render_cameras == every_step
        env.close()
    with pytest.raises(ConfigError, match=r"env\.render_cameras: .*'sometimes'"):
        make_env({"env": {"render_cameras": "sometimes"}})
