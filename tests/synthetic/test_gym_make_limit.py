"""``gym.make(id, max_episode_steps=N)`` replaces the stack's limit: one limit, inside the reward
wrappers, which see the truncation and settle the episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import evolve_envs  # noqa: F401  (registers the ids)
from evolve_envs.registration import RegisteredStack


def _limits(env: gym.Env) -> list[tuple[int, bool]]:
    """Every TimeLimit in the chain: (limit, inside the reward stack?)."""
    found, inside, layer = [], False, env
    while isinstance(layer, gym.Wrapper):
        inside = inside or isinstance(layer, RegisteredStack)
        if isinstance(layer, gym.wrappers.TimeLimit):
            found.append((layer._max_episode_steps, inside))
        layer = layer.env
    return found


def test_gym_make_max_episode_steps_replaces_the_limit_inside_the_reward_stack() -> None:
    env = gym.make("evolve_envs/ReachPlace-v0", config="reach_place", max_episode_steps=6)
    try:
        assert _limits(env) == [(6, True)]
        assert env.spec is not None and env.spec.kwargs["max_episode_steps"] == 6
        env.reset(seed=0)
        steps, truncated, info = 0, False, {}
        while not truncated:
            _, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
            steps += 1
            assert not terminated
        assert steps == 6
        summary = info["episode_reward_model"]  # the reward wrapper settled the episode
        assert summary["steps"] == 6 and summary["progress_calls"] >= 1
    finally:
        env.close()


def test_without_the_keyword_the_config_limit_stays_and_minus_one_keeps_it() -> None:
    for kwargs in ({}, {"max_episode_steps": -1}, {"max_episode_steps": 50}):
        env = gym.make(
            "evolve_envs/ReachPlace-v0",
            config="reach_place",
            reward_model={"enable": False},
            **kwargs,
        )
        try:
            assert _limits(env) == [(50, True)], kwargs  # the config's 50 steps
        finally:
            env.close()
