"""EpisodeScoreReward over real HTTP: video scorer and pickle scorer (mock backend, intensity)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from evolve_envs import make_env
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.video_score_client import VideoScoreClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.episode_score import EpisodeScoreReward
from evolve_envs.wrappers.frame_cache import FrameCache
from evolve_envs.wrappers.model_handle import lend
from tests.helpers.synthetic_env import SyntheticProgressEnv

SCRIPT = [0, 10, 20, 30, 40, 50, 60, 70, 80]  # last frame: score 0.8


def build(url: str, kind: str, script=SCRIPT, max_steps=8, success_at=None, **rm) -> gym.Env:
    return make_env(
        env_factory=SyntheticProgressEnv,
        scripts=[script],
        success_at=success_at,
        max_episode_steps=max_steps,
        reward_model={"enable": True, "endpoint": url, "kind": kind, **rm},
    )


def run(env: gym.Env):
    env.reset(seed=0)
    rewards, infos = [], []
    while True:
        _, r, term, trunc, info = env.step(env.action_space.sample())
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            return rewards, infos, term


@pytest.mark.parametrize("kind", ["video_score", "pickle_scorer"])
@pytest.mark.parametrize(
    ("binary", "coef", "expected"), [(False, 1.0, 0.8), (True, 2.0, 2.0), (False, 2.0, 1.6)]
)
def test_score_paid_once_at_truncation(mock_service, kind, binary, coef, expected) -> None:
    env = build(mock_service.url, kind, binary_reward=binary, reward_coef=coef)
    rewards, infos, _ = run(env)
    assert rewards[:-1] == [0.0] * 7
    assert rewards[-1] == pytest.approx(expected, abs=0.011 * coef)
    summary = infos[-1]["episode_reward_model"]
    assert summary["raw_score"] == pytest.approx(0.8, abs=0.011)
    assert not summary["fallback"] and infos[-1]["reward_model_errors"] == 0
    assert summary["high_progress_on_failure"] is True  # scored 0.8 >= 0.5, env failed
    env.close()


def test_binary_threshold_and_success_at_low_score(mock_service) -> None:
    low = [0, 10, 20, 30]
    env = build(mock_service.url, "video_score", script=low, max_steps=5, success_at=5)
    rewards, infos, term = run(env)
    assert term and rewards == [0.0] * 4 + [0.0]  # 0.3 < 0.5
    assert infos[-1]["episode_reward_model"]["success_at_low_progress"] is True
    env.close()


def test_ignore_terminations_scores_at_truncation_only(mock_service) -> None:
    env = build(mock_service.url, "video_score", success_at=3, ignore_terminations=True,
                binary_reward=False)  # fmt: skip
    rewards, infos, term = run(env)
    assert not term and len(rewards) == 8  # the success at step 3 did not end the episode
    assert infos[2]["env_terminated"] is True and infos[2]["is_success"] is True
    assert rewards[-1] == pytest.approx(0.8, abs=0.011) and sum(rewards[:-1]) == 0.0
    env.close()


def test_env_reward_added(mock_service) -> None:
    env = build(mock_service.url, "pickle_scorer", success_at=4, binary_reward=False,
                env_reward_weight=1.0, reward_weight=1.0)  # fmt: skip
    rewards, _, term = run(env)
    assert term and rewards[-1] == pytest.approx(1.0 + 0.4, abs=0.011)
    env.close()


@pytest.mark.parametrize("success", [True, False])
def test_fallback_to_env_success_when_the_service_is_dead(success: bool) -> None:
    svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    url = svc.url
    env = build(url, "video_score", success_at=6 if success else None, timeout=5.0,
                max_retries=0)  # fmt: skip
    try:
        env.reset(seed=0)
        svc.kill()
        rewards, infos = [], []
        while True:
            _, r, term, trunc, info = env.step(env.action_space.sample())
            rewards.append(r)
            infos.append(info)
            if term or trunc:
                break
        summary = infos[-1]["episode_reward_model"]
        assert summary["fallback"] and url in summary["error"]
        assert infos[-1]["reward_model_fallback"] and infos[-1]["reward_model_errors"] == 1
        assert rewards[-1] == (1.0 if success else 0.0)
    finally:
        env.close()
        svc.stop()


def test_strict_mode_raises(mock_service) -> None:
    svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    env = build(svc.url, "pickle_scorer", fail_on_request_error=True, max_steps=2)
    try:
        env.reset(seed=0)
        svc.kill()
        env.step(env.action_space.sample())
        with pytest.raises(Exception) as err:
            env.step(env.action_space.sample())
        # a dead service: the unreachable branch of the RewardServiceError tree
        assert type(err.value).__name__ == "ServiceUnreachableError" and svc.url in str(err.value)
    finally:
        env.close()
        svc.stop()


def test_use_rel_reward_after_the_end(mock_service) -> None:
    # Stepping on after the scored end (RLinf's chunk semantics): absolute pays again, rel not.
    for rel, extra in ((False, 0.8), (True, 0.0)):
        base = FrameCache(gym.wrappers.TimeLimit(SyntheticProgressEnv([SCRIPT]), 8))
        with VideoScoreClient(mock_service.url) as client:
            env = EpisodeScoreReward(base, lend(client), binary_reward=False, use_rel_reward=rel)
            rewards, _, _ = run(env)
            _, r, *_ = env.step(env.action_space.sample())
            assert rewards[-1] == pytest.approx(0.8, abs=0.011)
            assert r == pytest.approx(extra, abs=0.011)


def test_needs_a_frame_cache(mock_service) -> None:
    with PickleScorerClient(mock_service.url) as client:
        with pytest.raises(ValueError, match="FrameCache"):
            EpisodeScoreReward(SyntheticProgressEnv(), lend(client))
