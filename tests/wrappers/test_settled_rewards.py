"""``calls: deferred`` hands on exactly the episodes ``calls: sync`` plays, step for step.

The same scripted env (frames painted with a progress sequence, read back exactly by the mock
backend's intensity rule over a real server), the same actions and seeds, played once with
``sync`` and once with ``deferred``: every settled episode has ``sync``'s per-step rewards (model
part, env part and success bonus), progress, length, termination and summary, in every request
mode and done rule, with ``terminate_on_done`` on and off, dense / sparse / binary rewards and
``use_rel_reward``. The service answers 15 ms after a check while a step takes 2 ms, so answers
come back several steps late: some model dones are found while the episode still runs (it ends at
once, the steps after the check are cut), others only after the episode ended.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.hacking_alarm import HackingAlarm
from evolve_envs.wrappers.model_handle import lend
from evolve_envs.wrappers.model_success_bonus import ModelSuccessBonus
from evolve_envs.wrappers.progress_reward import ProgressReward
from evolve_envs.wrappers.settled_rewards import SettledRewards, settled_episodes
from tests.helpers.synthetic_env import SyntheticProgressEnv

# step:  0  1   2   3   4   5   6   7   8   9  10  11  12  13  14  15  16  17  18  19  20
RISE = [0, 5, 10, 20, 30, 45, 55, 62, 70, 80, 90, 96, 97, 98, 99, 100]
DIP = [0, 10, 20, 40, 30, 20, 35, 50, 61, 65, 70, 40, 30, 64, 70, 66]
LOW = [0, 5, 10, 15, 20, 25, 30]
LATE = [0, 2, 4, 8, 10, 20, 30, 40, 45, 50, 55, 60, 70, 80, 90, 96, 97, 98, 99]
SCRIPTS = [RISE, DIP, LOW, LATE, DIP]
SUCCESS_AT = [None, 14, 9, None, None]  # LOW's env success ends it at step 9
MAX_STEPS = 20
SCHEDULE = {"start_step": 3, "call_every": 2, "milestone_every": 4, "done_threshold": 0.6}
ACTION = np.zeros(7, np.float32)

MODES = ["pairwise", "incremental", "trajectory"]
DONE_RULES: list[Any] = [
    "threshold",
    "backend",
    "either",
    "both",
    {"kind": "k_of_n", "k": 2, "n": 3},
]
REWARDS = [
    ("dense", False),
    ("sparse", False),
    ("binary", False),
    ("sparse", True),
    ("binary", True),
]
SUMMARY_KEYS = [
    "progress",
    "max_progress",
    "steps",
    "progress_calls",
    "answers",
    "reward_model_errors",
    "done_by_progress",
    "done_step",
    "model_reward",
    "is_success",
    "model_terminated",
    "done_env_success",
    "termination_audit",
    "high_progress_on_failure",
]


@pytest.fixture(scope="module")
def service() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", {"rule": "intensity", "latency_ms": 15}) as svc:
        yield svc


@pytest.fixture()
def client(service: EmbeddedService) -> Iterator[ProgressClient]:
    with ProgressClient(service.url, max_workers=4) as c:
        yield c


def stack(client: ProgressClient, calls: str, step_s: float = 0.002, **settings: Any) -> gym.Env:
    env = SyntheticProgressEnv(SCRIPTS, success_at=SUCCESS_AT, step_delay_s=step_s)
    env = ProgressReward(
        gym.wrappers.TimeLimit(env, MAX_STEPS),
        lend(client),
        calls=calls,
        env_reward_weight=0.5,
        success_bonus=2.0,
        success_bonus_threshold=0.9,
        **SCHEDULE,
        **settings,
    )
    return gym.wrappers.RecordEpisodeStatistics(env)  # a wrapper above that changes no reward


def play(env: gym.Env, episodes: int) -> list[dict[str, Any]]:
    out = []
    env.reset(seed=0)
    for _ in range(episodes):
        rewards, progress = [], []
        while True:
            _, reward, terminated, truncated, info = env.step(ACTION)
            rewards.append(reward)
            progress.append(info["progress"])
            if terminated or truncated:
                break
        out.append(
            {
                "rewards": np.array(rewards),
                "progress": np.array(progress),
                "terminated": terminated,
                "truncated": truncated,
                "summary": info.get("episode_reward_model"),
            }
        )
        env.reset()
    return out


def settings_grid() -> list[dict[str, Any]]:
    """Every request mode x done rule x terminate_on_done; the reward modes take turns."""
    grid = []
    combos = itertools.product(MODES, DONE_RULES, [True, False])
    for i, (mode, rule, terminate) in enumerate(combos):
        reward_mode, rel = REWARDS[i % len(REWARDS)]
        grid.append(
            {
                "mode": mode,
                "done_by": rule,
                "terminate_on_done": terminate,
                "reward_mode": reward_mode,
                "use_rel_reward": rel,
                "check_at_episode_end": i % 3 == 0,
            }
        )
    return grid


def label(s: dict[str, Any]) -> str:
    rule = s["done_by"] if isinstance(s["done_by"], str) else "2_of_3"
    rel = "-rel" if s["use_rel_reward"] else ""
    end = "-end" if s["check_at_episode_end"] else ""
    return f"{s['mode']}-{rule}-term{int(s['terminate_on_done'])}-{s['reward_mode']}{rel}{end}"


def assert_same(settled: list[Any], expected: list[dict[str, Any]]) -> None:
    assert [ep.index for ep in settled] == list(range(1, len(expected) + 1))
    for k, (ep, sync) in enumerate(zip(settled, expected, strict=True)):
        where = f"episode {k + 1}"
        assert ep.length == len(sync["rewards"]), where
        assert ep.terminated == sync["terminated"] and ep.truncated == sync["truncated"], where
        np.testing.assert_array_equal(ep.rewards, sync["rewards"], err_msg=where)
        np.testing.assert_array_equal(ep.progress, sync["progress"], err_msg=where)
        for key in SUMMARY_KEYS:
            assert ep.summary[key] == sync["summary"][key], f"{where}: {key}"
        assert ep.summary["steps_played"] == ep.length + ep.cut_steps


@pytest.mark.parametrize("settings", settings_grid(), ids=label)
def test_settled_episodes_equal_sync(client: ProgressClient, settings: dict[str, Any]) -> None:
    episodes = len(SCRIPTS)
    with_sync = stack(client, "sync", **settings)
    try:
        expected = play(with_sync, episodes)
    finally:
        with_sync.close()
    deferred = stack(client, "deferred", **settings)
    try:
        played = play(deferred, episodes)
        settled = settled_episodes(deferred, wait=True)
        stats = deferred.get_wrapper_attr("tracker").deferred_stats()
    finally:
        deferred.close()
    assert_same(settled, expected)
    # the deferred env never returned a model reward: only the env part, as it stepped
    assert all(np.all(p["rewards"] == 0.5 * (p["rewards"] > 0)) for p in played)
    assert stats["unsettled_episodes"] == 0 and stats["answer_timeouts"] == 0
    assert stats["cut_steps"] == sum(ep.cut_steps for ep in settled)


def test_some_dones_cut_steps(client: ProgressClient) -> None:
    """A model done found while the episode runs ends it at once (30 ms steps: the answer is
    back within a few steps); the steps played after the done check are counted and left out,
    and the episodes still equal sync's."""
    settings = {"step_s": 0.03, "mode": "pairwise", "done_by": "threshold"}
    env = stack(client, "sync", **settings)
    try:
        expected = play(env, len(SCRIPTS))
    finally:
        env.close()
    env = stack(client, "deferred", **settings)
    try:
        play(env, len(SCRIPTS))
        settled = settled_episodes(env, wait=True)
    finally:
        env.close()
    assert_same(settled, expected)
    rise = settled[0]
    assert rise.terminated and rise.summary["done_step"] == rise.length
    assert rise.cut_steps > 0 and rise.steps_played < MAX_STEPS


def test_vector_rows_equal_sync_episodes(service: EmbeddedService) -> None:
    """SettledRewards over a vector env: the valid rows, split at their episode ends, are the
    sync episodes of each sub-env."""
    settings = {"mode": "pairwise", "done_by": "threshold", "reward_mode": "dense"}

    def thunk(calls: str) -> Any:
        def build() -> gym.Env:
            return stack(ProgressClient(service.url, max_workers=2), calls, **settings)

        return build

    steps = 70
    episodes: dict[str, list[list[list[float]]]] = {}
    for calls in ("sync", "deferred"):
        vec = gym.vector.SyncVectorEnv([thunk(calls), thunk(calls)])
        wrapped = SettledRewards(vec) if calls == "deferred" else None
        env = wrapped if wrapped is not None else vec
        env.reset(seed=0)
        rows = []
        after_end = np.zeros(2, bool)  # next-step autoreset: the row after an end is a reset
        for _ in range(2):  # two rollouts, settled before each "update"
            got = []
            for _ in range(steps // 2):
                _, reward, term, trunc, _ = env.step(np.zeros((2, 7), np.float32))
                got.append((reward, term, trunc, ~after_end))
                after_end = term | trunc
            if wrapped is not None:
                rollout = wrapped.settle()
                got = list(
                    zip(
                        rollout.rewards,
                        rollout.terminated,
                        rollout.truncated,
                        rollout.valid,
                        strict=True,
                    )
                )
            rows += got
        env.close()
        per_env: list[list[list[float]]] = [[[]], [[]]]
        for reward, term, trunc, valid in rows:
            for i in range(2):
                if not valid[i]:
                    continue
                per_env[i][-1].append(float(reward[i]))
                if term[i] or trunc[i]:
                    per_env[i].append([])
        episodes[calls] = per_env
    for i in range(2):
        whole_sync = episodes["sync"][i][:-1]  # the last one is still running
        whole_deferred = episodes["deferred"][i][:-1]
        n = min(len(whole_sync), len(whole_deferred))
        assert n >= 3
        assert whole_deferred[:n] == whole_sync[:n]


def test_the_alarm_sees_the_settled_episodes_as_it_sees_sync_ones(service: EmbeddedService) -> None:
    """A ``make_env`` stack with the success bonus and the hacking alarm: the settled episodes
    carry the rewards and the alarm states ``sync`` gives at each episode's end."""
    from evolve_envs import make_env

    def build(calls: str) -> gym.Env:
        block = {
            "enable": True,
            "endpoint": service.url,
            "calls": calls,
            **SCHEDULE,
            "success_bonus": 1.0,
            "alarm": {"enable": True, "window": 2, "baseline": 2},
        }
        return make_env(
            env_factory=SyntheticProgressEnv,
            scripts=SCRIPTS,
            success_at=SUCCESS_AT,
            max_episode_steps=MAX_STEPS,
            reward_model=block,
        )

    env = build("sync")
    try:
        expected, alarms = [], []
        env.reset(seed=0)
        for _ in range(2 * len(SCRIPTS)):
            rewards = []
            while True:
                _, reward, terminated, truncated, info = env.step(ACTION)
                rewards.append(reward)
                if terminated or truncated:
                    break
            expected.append(np.array(rewards))
            alarms.append(info["reward_alarm"])
            env.reset()
    finally:
        env.close()
    env = build("deferred")
    try:
        play(env, 2 * len(SCRIPTS))
        settled = settled_episodes(env, wait=True)
    finally:
        env.close()
    assert len(settled) == len(expected)
    for ep, rewards, alarm in zip(settled, expected, alarms, strict=True):
        np.testing.assert_array_equal(ep.rewards, rewards)
        assert ep.alarm == alarm
    assert any(ep.rewards[-1] >= 1.0 for ep in settled)  # a success bonus was paid


def test_a_wrapper_that_changes_rewards_refuses_a_deferred_stack(client: ProgressClient) -> None:
    """A reward added as the step returns would never reach a deferred trainer: refused, loud."""
    deferred = stack(client, "deferred")
    try:
        assert deferred.metadata["reward_timing"] == "deferred"
        with pytest.raises(ValueError, match=r"set reward_model\.success_bonus"):
            ModelSuccessBonus(deferred, bonus=1.0, threshold=0.9)
        with pytest.raises(ValueError, match=r"set reward_model\.alarm"):
            HackingAlarm(deferred, task="t")
    finally:
        deferred.close()
    synced = stack(client, "sync")
    try:
        assert "reward_timing" not in synced.metadata
        assert ModelSuccessBonus(synced, bonus=1.0, threshold=0.9).bonus == 1.0
    finally:
        synced.close()
