"""The synthetic ReachPlace task, its scene-reading mock rules, and make_env with ``env.id``."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
import simplejpeg

import evolve_envs  # noqa: F401  (registers the ids)
from evolve_envs import ConfigError, make_env
from evolve_envs.envs.synthetic import (
    ASTRAY_GAP,
    COLORS,
    NEAR_MISS_GAP,
    ReachPlaceEnv,
    play_behaviours,
    scripted_action,
)
from evolve_envs.reward.service.backends import scene_rules
from evolve_envs.reward.service.backends.mock import MockBackend


def _jpeg(frame: np.ndarray) -> np.ndarray:
    return simplejpeg.decode_jpeg(simplejpeg.encode_jpeg(frame, quality=85))


def _run(env: ReachPlaceEnv, seed: int, goal: str, steps: int = 50) -> list[tuple[dict, dict]]:
    obs, info = env.reset(seed=seed)
    out = [(obs, info)]
    for _ in range(steps):
        obs, _, terminated, _, info = env.step(scripted_action(env, goal))
        out.append((obs, info))
        if terminated:
            break
    return out


def test_scene_colours_match_the_rule() -> None:
    for name, rgb in scene_rules.SCENE_COLORS.items():
        assert COLORS[name] == rgb, name


def test_same_seed_same_scene_and_init_state_ids() -> None:
    env = ReachPlaceEnv()
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=8)
    c, _ = env.reset(seed=7)
    assert np.array_equal(a["image"], c["image"]) and not np.array_equal(a["image"], b["image"])
    d, _ = env.reset(seed=1, options={"init_state_id": 3})
    e, _ = env.reset(seed=2, options={"init_state_id": 3})
    assert np.array_equal(d["image"], e["image"]) and np.array_equal(d["state"], e["state"])


def test_scripted_expert_succeeds_with_monotone_progress_and_random_rarely_does() -> None:
    env = ReachPlaceEnv()
    for seed in range(10):
        traj = _run(env, seed, "task")
        progress = [info["true_progress"] for _, info in traj]
        assert traj[-1][1]["is_success"] and progress[-1] == 1.0, seed
        assert len(traj) - 1 <= 25, seed
        assert all(0.0 <= p <= 1.0 for p in progress)
        assert all(b >= a - 1e-9 for a, b in zip(progress, progress[1:], strict=False)), seed
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(100):
        env.reset(seed=seed)
        for _ in range(50):
            *_, terminated, _, info = env.step(rng.uniform(-1, 1, 2))
            if terminated:
                wins += 1
                break
    assert wins <= 10


class _Outcomes(gym.Wrapper):
    """Each episode's length and success, as the episodes end."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.episodes: list[tuple[int, bool]] = []
        self.steps = 0

    def reset(self, **kwargs):  # noqa: ANN003, ANN201
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):  # noqa: ANN001, ANN201
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if terminated or truncated:
            self.episodes.append((self.steps, bool(info["is_success"])))
        return obs, reward, terminated, truncated, info


def test_noisy_demonstrations_mostly_succeed_off_the_experts_path() -> None:
    played = {}
    for goal in ("task", "noisy"):
        env = _Outcomes(gym.wrappers.TimeLimit(ReachPlaceEnv(), 30))
        assert play_behaviours(env, {goal: 20}, seed=0) == 20
        played[goal] = env.episodes
    wins = sum(ok for _, ok in played["noisy"])
    assert wins >= 16, played["noisy"]  # most still solve the task within 30 steps
    mean = {g: np.mean([n for n, _ in eps]) for g, eps in played.items()}
    assert mean["noisy"] > 1.3 * mean["task"], mean  # the noise takes it off the straight path
    with pytest.raises(ValueError, match="noisy"):
        play_behaviours(ReachPlaceEnv(), {"wander": 1})


def _failures_played_to_the_end(goal: str, n: int) -> list[tuple[bool, np.ndarray, float]]:
    """``n`` episodes of ``goal``, each checked to fail after all 30 steps: per episode whether
    the block is held at the end, where it is, and how far from the zone's centre."""
    env, ends = _Outcomes(gym.wrappers.TimeLimit(ReachPlaceEnv(), 30)), []
    for seed in range(n):
        play_behaviours(env, {goal: 1}, seed=seed)
        pos = env.unwrapped.positions()
        gap = float(np.linalg.norm(pos["block"] - pos["target"]))
        ends.append((env.unwrapped._holding, pos["block"], gap))
    assert env.episodes == [(30, False)] * n  # every one a failure, played to 30
    return ends


def test_near_misses_hold_the_block_just_outside_the_zone_and_never_succeed() -> None:
    ends = _failures_played_to_the_end("near_miss", 20)
    assert all(holding for holding, _, _ in ends)
    gaps = [d for *_, d in ends]
    assert min(gaps) >= NEAR_MISS_GAP[0] - 1e-6 and max(gaps) <= NEAR_MISS_GAP[1] + 1e-6, gaps
    assert min(gaps) > ReachPlaceEnv().place_radius


def test_astray_carries_the_block_away_from_the_zone_edges_included_and_never_succeeds() -> None:
    ends = _failures_played_to_the_end("astray", 40)
    assert all(holding for holding, _, _ in ends)  # the block was taken, not left lying
    assert min(d for *_, d in ends) >= ASTRAY_GAP[0] - 0.05
    at_edge = sum(min(block.min(), 1 - block.max()) < 0.08 for _, block, _ in ends)
    assert 5 <= at_edge < 40, at_edge  # some by the picture's edge, not all


def test_reach_place_rule_reads_the_ground_truth_through_jpeg() -> None:
    env = ReachPlaceEnv()
    errors = []
    for seed in range(8):
        for goal in ("task", "distractor"):
            for obs, info in _run(env, seed, goal, steps=30):
                read = scene_rules.reach_place_progress(_jpeg(obs["image"])) / 100.0
                errors.append(abs(read - info["true_progress"]))
    assert np.mean(errors) < 0.02 and np.percentile(errors, 95) < 0.05


def test_hackable_rule_rises_when_only_the_distractor_moves() -> None:
    env = ReachPlaceEnv()
    for seed in range(6):
        traj = _run(env, seed, "distractor")
        first, last = traj[0], traj[-1]
        hack0 = scene_rules.hackable_progress(_jpeg(first[0]["image"]))
        hack1 = scene_rules.hackable_progress(_jpeg(last[0]["image"]))
        right1 = scene_rules.reach_place_progress(_jpeg(last[0]["image"]))
        assert hack1 >= 95 and hack1 > hack0 + 15, seed
        assert not last[1]["is_success"] and last[1]["true_progress"] < 0.5, seed
        assert right1 < 50, seed


def test_random_rule_ignores_the_scene_but_is_reproducible() -> None:
    env = ReachPlaceEnv()
    traj = _run(env, 0, "task")
    frames = [_jpeg(obs["image"]) for obs, _ in traj]
    scores = [scene_rules.random_progress(f, seed=1) for f in frames]
    assert scores == [scene_rules.random_progress(f, seed=1) for f in frames]
    truth = [info["true_progress"] for _, info in traj]
    assert abs(np.corrcoef(scores, truth)[0, 1]) < 0.9
    backend = MockBackend(rule="random", seed=1)
    assert backend.progress(frames[0]) == scores[0]


def test_mock_backend_rejects_an_unknown_rule() -> None:
    with pytest.raises(ValueError, match="reach_place"):
        MockBackend(rule="reach-place")


@pytest.fixture(scope="module")
def stack() -> Iterator[gym.Env]:
    env = make_env("reach_place")
    yield env
    env.close()


def test_make_env_from_yaml_gets_rewards_from_the_service(stack: gym.Env) -> None:
    base = stack.unwrapped
    assert isinstance(base, ReachPlaceEnv)
    obs, info = stack.reset(seed=2)
    total, steps = 0.0, 0
    for _ in range(50):
        obs, reward, terminated, truncated, info = stack.step(scripted_action(base))
        total += reward
        steps += 1
        if terminated or truncated:
            break
    assert info["is_success"] and info["progress_calls"] >= 1
    # the model's progress (percent) tracks the ground truth (fraction) read over JPEG and HTTP
    assert abs(info["episode_reward_model"]["max_progress"] / 100 - 1.0) < 0.15
    assert total > 0.5


def test_make_env_env_id_errors_and_time_limit() -> None:
    with pytest.raises(ConfigError, match="env.id"):
        make_env({"env": {"id": "evolve_envs/NoSuchTask-v0"}})
    env = make_env({"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 3}})
    env.reset(seed=0)
    truncated = False
    for _ in range(3):
        *_, truncated, _ = env.step(np.zeros(2, np.float32))
    assert truncated
    env.close()
    with pytest.raises(ConfigError, match="env.bogus"):
        make_env({"env": {"id": "evolve_envs/ReachPlace-v0", "bogus": 1}})


def test_rollout_with_two_worker_processes_on_a_non_libero_env(tmp_path) -> None:  # noqa: ANN001
    """Asking the sub-envs for LIBERO-only attributes must not end an async worker."""
    import json

    from evolve_envs.cli.rollout import RolloutOptions, run_rollout

    opts = RolloutOptions(
        config="reach_place", episodes=3, num_envs=2, max_steps=6, out=tmp_path,
        video=False, progress_bar=False, tensorboard=False,
    )  # fmt: skip
    run_rollout(opts)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["episodes"]) == 3
