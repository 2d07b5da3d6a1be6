"""One real LIBERO episode (80 steps) through the full stack against the mock reward service."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs import make_env
from evolve_envs.stack.loading import CONFIG_DIR
from evolve_envs.wrappers.progress_reward import ProgressReward

pytestmark = pytest.mark.libero

STEPS = 80
CHECKS = [16, 32, 48, 64, 80]
HOLD = np.array([0, 0, 0, 0, 0, 0, -1.0], dtype=np.float32)  # no motion, gripper open


@pytest.fixture(scope="session")
def libero_stack(mock_service) -> Iterator[gym.Env]:
    env = make_env(
        CONFIG_DIR / "libero_10.yaml",
        task_id=0,
        image_size=128,
        cameras=["agentview"],
        init_state=0,
        max_episode_steps=STEPS,
        reward_model={
            "endpoint": mock_service.url,
            "start_step": 16,
            "call_every": 16,
            "milestone_every": 32,
        },
    )
    yield env
    env.close()


def test_libero_episode_through_the_stack(libero_stack: gym.Env) -> None:
    env = libero_stack
    assert isinstance(env, ProgressReward) and isinstance(env.env, gym.wrappers.TimeLimit)
    obs, info = env.reset(seed=0)
    assert info["progress"] == 0.0 and info["task_description"]
    rewards, infos = [], []
    for _ in range(STEPS):
        obs, r, term, trunc, info = env.step(HOLD)
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            break
    assert len(rewards) == STEPS and trunc and not term
    checked = [t for t, i in enumerate(infos, start=1) if i["progress_checked"]]
    assert checked == CHECKS
    assert all(rewards[t - 1] == 0.0 for t in range(1, STEPS + 1) if t not in CHECKS)
    assert [infos[t - 1]["progress_calls"] for t in CHECKS] == [1, 2, 3, 4, 5]
    assert infos[CHECKS[0] - 1]["reward_model_latency_s"] > 0.0
    for key in ("reward_model_errors", "reward_model_fallback", "done_by_progress", "is_success"):
        assert key in infos[-1]
    assert infos[-1]["reward_model_errors"] == 0 and infos[-1]["is_success"] is False
    summary = infos[-1]["episode_reward_model"]
    assert summary["answers"] == 5 and summary["steps"] == STEPS
    assert 0.0 <= summary["progress"] <= 100.0
    assert sum(rewards) == pytest.approx(summary["progress"] / 100.0, abs=1e-9)
    assert obs["agentview_image"].shape == (128, 128, 3)
