"""Failure policy end to end: the reward service is killed in the middle of an episode."""

from __future__ import annotations

import pytest

from evolve_envs import make_env
from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.synthetic_env import SyntheticProgressEnv

SCRIPT = [0, 5, 10, 20, 40, 30, 20, 25, 30, 40, 50, 60, 70, 80, 90]


def build(url: str, **rm):
    return make_env(
        env_factory=SyntheticProgressEnv,
        scripts=[SCRIPT],
        max_episode_steps=14,
        reward_model={
            "enable": True,
            "endpoint": url,
            "start_step": 4,
            "call_every": 2,
            "milestone_every": 4,
            "timeout": 5.0,
            "max_retries": 1,
            **rm,
        },
    )


@pytest.mark.parametrize("calls", ["sync", "async"])
def test_fallback_mode_finishes_the_episode(calls: str) -> None:
    svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    env = build(svc.url, calls=calls, max_lag_steps=0)
    try:
        env.reset(seed=0)
        rewards, infos = [], []
        for t in range(1, 15):
            if t == 7:
                svc.kill()  # dies after the checks at 4 and 6 were answered
            _, r, term, trunc, info = env.step(env.action_space.sample())
            rewards.append(r)
            infos.append(info)
            if term or trunc:
                break
        assert trunc and not term and len(rewards) == 14
        summary = infos[-1]["episode_reward_model"]
        assert summary["reward_model_errors"] == 4  # checks at 8, 10, 12, 14
        assert summary["reward_model_fallbacks"] == 4
        assert svc.url in summary["last_error"]
        assert [infos[t - 1]["reward_model_fallback"] for t in (8, 9, 10)] == [True, False, True]
        assert infos[-1]["reward_model_errors"] == 4
        assert infos[-1]["progress"] == pytest.approx(
            20.0
        )  # held at the last answered check (step 6)
        assert sum(rewards) == pytest.approx(0.20)
    finally:
        env.close()
        svc.stop()


def test_strict_mode_raises_the_named_error() -> None:
    svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    env = build(svc.url, fail_on_request_error=True)
    try:
        env.reset(seed=0)
        for _ in range(6):
            env.step(env.action_space.sample())
        svc.kill()
        env.step(env.action_space.sample())  # step 7: no check
        with pytest.raises(RewardServiceError) as err:
            env.step(env.action_space.sample())  # step 8: the check fails
        assert svc.url in str(err.value) and "/pairwise-critic" in str(err.value)
    finally:
        env.close()
        svc.stop()
