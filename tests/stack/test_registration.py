"""``gym.make(id)`` with no arguments: ReachPlace's default stack (the embedded mock reward model,
50 steps) with its limit registered, read from the spec and applied inside the reward wrappers
too; ``config=`` and ``reward_model={"enable": False}`` still choose otherwise."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import evolve_envs  # noqa: F401  (registers the ids)
from evolve_envs.stack.factory import make_registered
from evolve_envs.wrappers.progress_reward import ProgressReward

ID = "evolve_envs/ReachPlace-v0"


def _limits(env: gym.Env) -> list[tuple[int, bool]]:
    """Every TimeLimit in the chain, outermost first: (limit, inside the reward wrapper?)."""
    found, inside, layer = [], False, env
    while isinstance(layer, gym.Wrapper):
        inside = inside or isinstance(layer, ProgressReward)
        if isinstance(layer, gym.wrappers.TimeLimit):
            found.append((layer._max_episode_steps, inside))
        layer = layer.env
    return found


def test_ids_register_their_limits() -> None:
    assert gym.spec(ID).max_episode_steps == 50
    limits = {name: gym.spec(name).max_episode_steps for name in evolve_envs.ENV_IDS}
    assert limits == {
        "evolve_envs/LIBERO-10-v0": 520,
        "evolve_envs/LIBERO-Spatial-v0": 220,
        "evolve_envs/LIBERO-Object-v0": 280,
        "evolve_envs/LIBERO-Goal-v0": 300,
        "evolve_envs/LIBERO-90-v0": 400,
    }


def test_no_arguments_gives_the_default_stack_with_rewards_and_an_end() -> None:
    env = gym.make(ID)
    try:
        assert _limits(env) == [(50, False), (50, True)]  # Gymnasium's, then the stack's own
        assert env.spec is not None and env.spec.max_episode_steps == 50
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        rewards, steps, truncated, info = [], 0, False, {}
        while not truncated:
            action = rng.uniform(-1, 1, 2).astype(np.float32)
            _, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
            steps += 1
            if terminated:
                break
        assert steps <= 50
        summary = info["episode_reward_model"]  # the reward wrapper settled the episode
        assert summary["steps"] == steps and summary["progress_calls"] >= 1
        assert info["reward_model_reward"] == rewards[-1] and any(r != 0 for r in rewards)
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "stack"),
    [
        ({"reward_model": {"enable": False}}, "TimeLimit"),
        ({"config": {"env": {"id": ID, "max_episode_steps": 7}}}, "TimeLimit"),
        ({"config": ["reach_place", {"env": {"max_episode_steps": 7}}]}, "ProgressReward"),
    ],
)
def test_config_and_reward_model_still_choose(kwargs: dict, stack: str) -> None:
    env = gym.make(ID, **kwargs)
    try:
        inner = env.env.env.env if isinstance(env, gym.wrappers.TimeLimit) else env
        assert type(inner).__name__ == stack
        expected = 7 if "config" in kwargs else 50
        assert _limits(env)[-1][0] == expected  # the stack's own limit: the config's
    finally:
        env.close()


def test_gym_make_max_episode_steps_is_gymnasiums_outer_limit_only() -> None:
    """Gymnasium does not pass its ``max_episode_steps`` to the entry point: it wraps its own
    ``TimeLimit`` outside; the stack keeps the registered limit."""
    env = gym.make(ID, reward_model={"enable": False}, max_episode_steps=100)
    try:
        assert _limits(env) == [(100, False), (50, False)]
    finally:
        env.close()


def test_make_registered_reads_no_caller_frame() -> None:
    env = make_registered(id=ID, reward_model={"enable": False})
    try:
        assert [limit for limit, _ in _limits(env)] == [50]
    finally:
        env.close()


def test_a_longer_config_limit_with_gymnasiums_limit_off() -> None:
    longer = ["reach_place", {"env": {"max_episode_steps": 80}}]
    env = gym.make(ID, config=longer, reward_model={"enable": False}, max_episode_steps=-1)
    try:
        assert _limits(env) == [(80, False)]  # the stack's own, nothing outside
    finally:
        env.close()
