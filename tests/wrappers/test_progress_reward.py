"""Exact reward and termination sequences of ProgressReward over real HTTP (mock backend).

The synthetic env paints frame ``t`` with progress ``script[t]``; the mock backend's intensity
rule reads it back exactly and its pairwise critic is ``100·(pb − pa)/(100 − pa)``. The expected
sequences below are computed from docs/PROGRESS.md by :func:`reference` (written independently
of the wrapper code).
"""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

from evolve_envs import ConfigError
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.wrappers.frame_cache import FrameCache
from evolve_envs.wrappers.model_handle import lend
from evolve_envs.wrappers.progress_reward import ProgressReward
from tests.helpers.synthetic_env import SyntheticProgressEnv

# step:   0  1   2   3   4   5   6   7   8   9  10  11  12  13  14
DIP = [0, 5, 10, 20, 40, 30, 20, 25, 30, 40, 50, 60, 70, 80, 90]
RISE = [0, 10, 20, 30, 40, 50, 60, 70, 95, 96, 97, 98, 99, 99, 99]
SCHEDULE = {"start_step": 4, "call_every": 2, "milestone_every": 4}


def mock_critic(pa: float, pb: float) -> float:
    if pa >= 100:
        return 0.0 if pb >= 100 else -100.0
    return max(-100.0, min(100.0, 100.0 * (pb - pa) / (100.0 - pa)))


def reference(
    script: list[float],
    last_step: int,
    mode: str,
    rule: str = "vlac",
    start_step: int = 4,
    call_every: int = 2,
    milestone_every: int = 4,
) -> dict[int, float]:
    """Progress after each check step, per docs/PROGRESS.md (milestone: the PREVIOUS milestone
    frame)."""
    out: dict[int, float] = {}
    ms_step, ms_value = 0, 0.0
    prev_step, prev_value = 0, 0.0
    for t in range(start_step, last_step + 1, call_every):
        if mode == "trajectory":
            v = float(script[t])  # relative to frame 0, which is painted 0 in these scripts
        else:
            base_step, base_value = (
                (ms_step, ms_value) if mode == "pairwise" else (prev_step, prev_value)
            )
            c = mock_critic(script[base_step], script[t])
            if c < 0 and rule == "robodopamine":
                v = base_value + base_value * c / 100.0
            else:
                v = base_value + (100.0 - base_value) * c / 100.0
            v = min(100.0, max(0.0, v))
        if t - ms_step >= milestone_every:
            ms_step, ms_value = t, v
        prev_step, prev_value = t, v
        out[t] = v
    return out


def dense_expected(ref: dict[int, float], last_step: int) -> list[float]:
    rewards, prev = [], 0.0
    for t in range(1, last_step + 1):
        if t in ref:
            rewards.append((ref[t] - prev) / 100.0)
            prev = ref[t]
        else:
            rewards.append(0.0)
    return rewards


def make(client, script, max_steps=14, success_at=None, **settings) -> gym.Env:
    env = SyntheticProgressEnv([script], success_at=success_at)
    env = gym.wrappers.TimeLimit(env, max_steps)
    env = FrameCache(env)
    return ProgressReward(env, lend(client), **{**SCHEDULE, **settings})


def run_episode(env: gym.Env, max_steps: int = 100):
    env.reset(seed=0)
    rewards, infos, term = [], [], False
    for _ in range(max_steps):
        _, r, term, trunc, info = env.step(env.action_space.sample())
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            break
    return rewards, infos, term


@pytest.mark.parametrize("mode", ["pairwise", "incremental"])
@pytest.mark.parametrize("rule", ["vlac", "robodopamine"])
def test_dense_sync_exact_sequence(client: ProgressClient, mode: str, rule: str) -> None:
    env = make(client, DIP, mode=mode, negative_rule=rule)
    rewards, infos, term = run_episode(env)
    ref = reference(DIP, 14, mode, rule)
    assert rewards == pytest.approx(dense_expected(ref, 14), abs=1e-9)
    assert not term and len(rewards) == 14
    checked = [t for t, info in enumerate(infos, start=1) if info["progress_checked"]]
    assert checked == [4, 6, 8, 10, 12, 14]
    assert [infos[t - 1]["progress"] for t in checked] == pytest.approx([ref[t] for t in checked])
    assert sum(rewards) == pytest.approx(ref[14] / 100.0, abs=1e-9)
    assert infos[-1]["progress_calls"] == 6
    summary = infos[-1]["episode_reward_model"]
    assert summary["reward_model_errors"] == 0 and summary["answers"] == 6
    env.close()


def test_modes_differ_only_where_the_milestone_rule_matters(client: ProgressClient) -> None:
    # Under the Robo-Dopamine rule a dip is judged against the reference frame, so pairwise
    # (previous milestone) and incremental (previous check) disagree after the dip at step 6.
    pw = reference(DIP, 14, "pairwise", "robodopamine")
    inc = reference(DIP, 14, "incremental", "robodopamine")
    assert pw[6] == pytest.approx(inc[6])
    assert pw[8] != pytest.approx(inc[8])
    env = make(client, DIP, mode="pairwise", negative_rule="robodopamine")
    _, infos, _ = run_episode(env)
    assert infos[7]["progress"] == pytest.approx(pw[8])  # 40 · (1 − 1/6) = 33.33…
    assert infos[7]["progress"] == pytest.approx(100 / 3)
    env.close()


def test_trajectory_mode_dense(client: ProgressClient) -> None:
    env = make(client, DIP, mode="trajectory")
    rewards, infos, _ = run_episode(env)
    ref = reference(DIP, 14, "trajectory")
    assert rewards == pytest.approx(dense_expected(ref, 14), abs=1e-9)
    assert infos[-1]["progress"] == 90.0
    env.close()


@pytest.mark.parametrize("mode", ["pairwise", "incremental", "trajectory"])
def test_sparse_pays_final_progress_once(client: ProgressClient, mode: str) -> None:
    env = make(client, DIP, mode=mode, reward_mode="sparse")
    rewards, infos, _ = run_episode(env)
    final = reference(DIP, 14, mode)[14]
    assert rewards[:-1] == [0.0] * 13
    assert rewards[-1] == pytest.approx(final / 100.0)
    assert infos[-1]["episode_reward_model"]["progress"] == pytest.approx(final)
    env.close()


@pytest.mark.parametrize("mode", ["pairwise", "incremental", "trajectory"])
def test_binary_pays_coef_at_end(client: ProgressClient, mode: str) -> None:
    env = make(
        client, DIP, mode=mode, reward_mode="binary", reward_coef=2.0, success_threshold=0.85
    )
    rewards, _, _ = run_episode(env)
    assert rewards == [0.0] * 13 + [2.0]  # final progress 90 >= 85
    env.close()
    env = make(client, DIP, mode=mode, reward_mode="binary", success_threshold=0.95)
    rewards, _, _ = run_episode(env)
    assert rewards == [0.0] * 14  # 90 < 95
    env.close()


def test_binary_with_rel_reward_pays_at_the_crossing(client: ProgressClient) -> None:
    env = make(client, DIP, reward_mode="binary", reward_coef=2.0, use_rel_reward=True)
    rewards, _, _ = run_episode(env)
    expected = [0.0] * 14
    expected[10 - 1] = 2.0  # progress 50 at the check at step 10 reaches 0.5
    assert rewards == expected
    env.close()


def test_sparse_with_rel_reward_equals_dense(client: ProgressClient) -> None:
    env = make(client, DIP, reward_mode="sparse", use_rel_reward=True)
    rewards, _, _ = run_episode(env)
    assert rewards == pytest.approx(dense_expected(reference(DIP, 14, "pairwise"), 14))
    env.close()


@pytest.mark.parametrize(("comparison", "end_step"), [(">=", 8), (">", 10)])
def test_termination_threshold_comparison(
    client: ProgressClient, comparison: str, end_step: int
) -> None:
    env = make(client, RISE, done_threshold=0.95, done_comparison=comparison)
    rewards, infos, term = run_episode(env)
    assert term and len(rewards) == end_step
    assert infos[-1]["done_by_progress"] is True
    assert not any(info["done_by_progress"] for info in infos[:-1])
    assert sum(rewards) == pytest.approx(RISE[end_step] / 100.0)
    summary = infos[-1]["episode_reward_model"]
    assert summary["done_step"] == end_step
    assert summary["high_progress_on_failure"] is True  # env never succeeded
    env.close()


def test_no_termination_when_disabled(client: ProgressClient) -> None:
    env = make(client, RISE, terminate_on_done=False)
    rewards, infos, term = run_episode(env)
    assert not term and len(rewards) == 14
    assert infos[7]["done_by_progress"] and infos[-1]["done_by_progress"]
    env.close()


def test_backend_done_decides(client: ProgressClient) -> None:
    # The threshold alone would stop at step 4 (progress 40 >= 0.3); the backend (p >= 95) at 8.
    env = make(client, RISE, done_threshold=0.3, done_by="backend")
    rewards, infos, term = run_episode(env)
    assert term and len(rewards) == 8
    assert infos[-1]["progress_calls"] == 2 * 3  # critic + done per check
    env.close()
    env = make(client, RISE, done_threshold=0.3, done_by="either")
    _, infos, term = run_episode(env)
    assert term and len(infos) == 4
    env.close()


def test_env_reward_mixing_and_check_at_episode_end(client: ProgressClient) -> None:
    # The env succeeds (reward 1, terminated) at step 9, which is not a scheduled check.
    env = make(client, DIP, success_at=9, env_reward_weight=1.0, reward_weight=0.5)
    rewards, infos, term = run_episode(env)
    assert term and len(rewards) == 9
    assert rewards[-1] == pytest.approx(1.0)
    assert infos[-1]["env_reward"] == 1.0 and infos[-1]["is_success"] is True
    assert infos[-1]["episode_reward_model"]["success_at_low_progress"] is True
    env.close()
    env = make(client, DIP, success_at=9, env_reward_weight=1.0, reward_weight=0.5,
               check_at_episode_end=True)  # fmt: skip
    rewards, infos, _ = run_episode(env)
    assert rewards[-1] == pytest.approx(1.0 + 0.5 * (DIP[9] - DIP[8]) / 100.0)
    assert infos[-1]["progress"] == DIP[9]
    env.close()


def test_async_lag_bound_and_exact_sum(slow_service) -> None:
    lag = 3
    with ProgressClient(slow_service.url) as client:
        env = make(client, DIP, calls="async", max_lag_steps=lag)
        rewards, infos, _ = run_episode(env)
        env.close()
    ref = reference(DIP, 14, "pairwise")
    assert sum(rewards) == pytest.approx(ref[14] / 100.0, abs=1e-9)
    for s, info in enumerate(infos, start=1):
        # every check sent at least `lag` steps ago has been applied, and none from the future
        must = [t for t in ref if t <= s - lag]
        allowed = {ref[t] for t in ref if (not must or t >= must[-1]) and t <= s}
        if not must:
            allowed.add(0.0)
        assert any(math.isclose(info["progress"], v) for v in allowed), (s, info["progress"])
    assert infos[-1]["progress"] == pytest.approx(ref[14])  # settled at truncation
    assert infos[-1]["progress_pending"] == 0


def test_async_outstanding_requests_settled_at_episode_end(slow_service) -> None:
    with ProgressClient(slow_service.url) as client:
        env = make(client, DIP, calls="async", max_lag_steps=1000, mode="trajectory")
        rewards, infos, _ = run_episode(env)
        env.close()
    assert sum(rewards) == pytest.approx(0.9, abs=1e-9)
    assert infos[-1]["episode_reward_model"]["answers"] == 6
    assert infos[-1]["progress"] == 90.0


def test_async_termination_within_lag(slow_service) -> None:
    lag = 2
    with ProgressClient(slow_service.url) as client:
        env = make(client, RISE, calls="async", max_lag_steps=lag)
        rewards, infos, term = run_episode(env)
        env.close()
    assert term and 8 <= len(rewards) <= 8 + lag
    assert sum(rewards) == pytest.approx(infos[-1]["progress"] / 100.0, abs=1e-9)
    assert infos[-1]["episode_reward_model"]["done_step"] == len(rewards)


def test_capabilities_refuse_impossible_configs(progress_only_service) -> None:
    with ProgressClient(progress_only_service.url) as client:
        caps = client.capabilities().value  # a lent client: the caller hands the capabilities
        with pytest.raises(ConfigError, match="trajectory"):
            make(client, DIP, mode="pairwise", capabilities=caps)
        with pytest.raises(ConfigError, match="incremental"):
            make(client, DIP, mode="incremental", capabilities=caps)
        with pytest.raises(ConfigError, match="done"):
            make(client, DIP, mode="trajectory", done_by="backend", capabilities=caps)
        env = make(client, DIP, mode="trajectory", capabilities=caps)
        rewards, _, _ = run_episode(env)
        assert sum(rewards) == pytest.approx(0.9)
        env.close()


def test_reset_mid_episode_starts_clean(client: ProgressClient) -> None:
    env = SyntheticProgressEnv([DIP, RISE])
    env = ProgressReward(FrameCache(gym.wrappers.TimeLimit(env, 14)), lend(client), **SCHEDULE)
    env.reset()
    for _ in range(9):
        env.step(env.action_space.sample())
    _, info = env.reset()  # abandon episode 0 (DIP) at step 9
    assert info["progress"] == 0.0 and info["progress_calls"] == 0
    fresh = {
        "progress": 0.0, "progress_checked": False, "progress_calls": 0, "progress_pending": 0,
        "reward_model_latency_s": 0.0, "reward_model_errors": 0,
        "reward_model_fallback": False, "done_by_progress": False,
    }  # fmt: skip
    assert {k: info[k] for k in fresh} == fresh
    rewards, infos, term = run_episode(env)  # run_episode resets again: episode 2 plays DIP
    assert sum(rewards) == pytest.approx(0.9)
    env.close()
