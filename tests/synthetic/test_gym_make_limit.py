"""``gym.make(id, max_episode_steps=N)`` replaces the stack's limit: the limit inside the reward
wrappers becomes N (they see the truncation and settle the episode), and Gymnasium's outer
``TimeLimit`` holds the same N."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import evolve_envs  # noqa: F401  (registers the ids)
from evolve_envs.wrappers.progress_reward import ProgressReward


def _limits(env: gym.Env) -> list[tuple[int, bool]]:
    """Every TimeLimit in the chain, outermost first: (limit, inside the reward wrapper?)."""
    found, inside, layer = [], False, env
    while isinstance(layer, gym.Wrapper):
        inside = inside or isinstance(layer, ProgressReward)
        if isinstance(layer, gym.wrappers.TimeLimit):
            found.append((layer._max_episode_steps, inside))
        layer = layer.env
    return found


def test_gym_make_max_episode_steps_sets_the_limit_inside_the_reward_stack() -> None:
    env = gym.make("evolve_envs/ReachPlace-v0", config="reach_place", max_episode_steps=6)
    try:
        assert _limits(env) == [(6, False), (6, True)]  # Gymnasium's, then the stack's own
        env.reset(seed=0)
        for episode in range(2):  # the two limits stay in step across resets
            steps, truncated, info = 0, False, {}
            while not truncated:
                _, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
                steps += 1
                assert not terminated
            assert steps == 6, episode
            summary = info["episode_reward_model"]  # the reward wrapper settled the episode
            assert summary["steps"] == 6 and summary["progress_calls"] >= 1
            env.reset()
    finally:
        env.close()


@pytest.mark.parametrize("kwargs", [{}, {"max_episode_steps": -1}])
def test_without_the_keyword_the_config_limit_stays(kwargs: dict) -> None:
    env = gym.make("evolve_envs/ReachPlace-v0", config="reach_place", **kwargs)
    try:
        assert _limits(env) == [(50, True)]  # the config's 50 steps, inside only
    finally:
        env.close()


def test_make_env_elsewhere_is_not_affected() -> None:
    from evolve_envs.stack.factory import make_registered

    env = make_registered(config="reach_place", reward_model={"enable": False})
    try:
        assert [limit for limit, _ in _limits(env)] == [50]
    finally:
        env.close()
