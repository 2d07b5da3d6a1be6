"""One reward definition: every path that builds an env from one YAML pays the same rewards.

One seeded ReachPlace episode, played with the same scripted actions, through ``gym.make``,
``make_vec``, a training worker's env and the RLinf adapter, against one reward service (the
mock backend's ``reach_place`` rule behind a real server): the per-step rewards are identical,
the success bonus included.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs import load_train_config, make_vec
from evolve_envs.envs.synthetic import ReachPlaceEnv, scripted_action
from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.training.worker_env import make_worker_env

SEED = 3
STEPS = 40


@pytest.fixture(scope="module")
def service():
    with EmbeddedService("mock", {"rule": "reach_place"}) as svc:
        yield svc


def block(url: str) -> dict[str, Any]:
    """The shipped DistRL config's reward block, with synchronous calls (one answer per step,
    whatever the machine's speed) and the service above."""
    rm = load_train_config("reach_place").stored()["reward_model"]
    rm.update(endpoint=url, calls="sync")
    assert rm["success_bonus"] > 0 and rm["check_at_episode_end"]
    return rm


def stack_config(url: str) -> dict[str, Any]:
    return {
        "env": {"id": "evolve_envs/ReachPlace-v0", "image_size": 64, "max_episode_steps": STEPS},
        "reward_model": block(url),
    }


def play_gym(env: gym.Env) -> list[float]:
    env.reset(seed=SEED)
    base = env.unwrapped
    rewards = []
    while True:
        _, reward, terminated, truncated, _ = env.step(scripted_action(base))
        rewards.append(float(reward))
        if terminated or truncated:
            return rewards


class OneReachPlace:
    """ReachPlace with the batch interface of RLinf's LIBERO env (one sub-env)."""

    num_envs = 1
    auto_reset = False
    ignore_terminations = False

    def __init__(self) -> None:
        self.env = gym.wrappers.TimeLimit(ReachPlaceEnv(image_size=64), STEPS)

    def _obs(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        return {
            "main_images": obs["image"][None],
            "task_descriptions": [self.env.unwrapped.task_description],
        }

    def reset(self, env_idx: Any = None, reset_state_ids: Any = None) -> tuple[Any, dict]:
        obs, _ = self.env.reset(seed=SEED)
        return self._obs(obs), {}

    def step(self, actions: Any, auto_reset: bool = True):
        obs, reward, terminated, truncated, _ = self.env.step(np.asarray(actions)[0])
        return (self._obs(obs), np.array([reward]), np.array([terminated]),
                np.array([truncated]), {})  # fmt: skip

    def close(self) -> None:
        self.env.close()


def play_rlinf(url: str) -> list[float]:
    inner = OneReachPlace()
    env = RLinfProgressReward.from_config(inner, block(url), environ={})
    try:
        env.reset()
        rewards = []
        while True:
            action = scripted_action(inner.env.unwrapped)[None]
            _, reward, term, trunc, _ = env.step(action, auto_reset=False)
            rewards.append(float(reward[0]))
            if term[0] or trunc[0]:
                return rewards
    finally:
        env.close()


@pytest.mark.slow
def test_every_path_pays_the_same_rewards(service) -> None:
    cfg = stack_config(service.url)
    env = gym.make("evolve_envs/ReachPlace-v0", config=cfg)
    try:
        by_gym = play_gym(env)
    finally:
        env.close()
    assert by_gym[-1] >= 1.0, by_gym  # the scripted expert places the block: the bonus is paid

    vec = make_vec(cfg, num_envs=1)
    try:
        vec.reset(seed=SEED)
        base = vec.get_attr("unwrapped")[0]
        by_vec = []
        while True:
            _, reward, terminated, truncated, _ = vec.step(scripted_action(base)[None])
            by_vec.append(float(reward[0]))
            if terminated[0] or truncated[0]:
                break
    finally:
        vec.close()

    train_cfg = load_train_config(
        "reach_place", overrides={"reward_model": block(service.url), "env": cfg["env"]}
    )
    worker_env = make_worker_env(train_cfg, 0)
    try:
        by_worker = play_gym(worker_env)
    finally:
        worker_env.close()

    by_rlinf = play_rlinf(service.url)

    assert by_vec == by_gym
    assert by_worker == by_gym
    assert by_rlinf == pytest.approx(by_gym, abs=1e-6)
