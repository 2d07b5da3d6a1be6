"""FrameCache / FrameStore (memory, thinning, reset) and ProgressiveHorizon (stages)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.wrappers.frame_cache import (
    FrameCache,
    FrameStore,
    find_frame_store,
    uniform_indices,
)
from evolve_envs.wrappers.progressive_horizon import ProgressiveHorizon, parse_stages
from tests.helpers.synthetic_env import SyntheticProgressEnv, grey_level


def scene(step: int, size: int = 256) -> np.ndarray:
    """A smooth, textured frame (gradients + a moving block), like a rendered scene."""
    y, x = np.mgrid[0:size, 0:size]
    img = np.stack([(x + step) % 256, (y * 2) % 256, (x + y) // 2 % 256], axis=-1)
    img[40 + step % 100 : 80 + step % 100, 60:120] = (200, 30, 30)
    return img.astype(np.uint8)


def test_jpeg_store_of_a_long_episode_is_a_small_fraction_of_raw() -> None:
    store = FrameStore()
    for t in range(521):
        store.add(t, scene(t))
    raw = 521 * 256 * 256 * 3
    assert len(store) == 521
    assert store.nbytes < 0.2 * raw
    decoded = store.get(300)
    assert decoded.shape == (256, 256, 3)
    assert np.abs(decoded.astype(int) - scene(300).astype(int)).mean() < 4


def test_raw_store_is_exact() -> None:
    store = FrameStore(encoding="raw")
    store.add(0, scene(0, 32))
    assert np.array_equal(store.get(0), scene(0, 32)) and store.nbytes == 32 * 32 * 3


@pytest.mark.parametrize("max_frames", [3, 4, 7, 16])
def test_thinning_keeps_first_last_and_uniform_coverage(max_frames: int) -> None:
    store = FrameStore(encoding="raw", max_frames=max_frames)
    for t in range(200):
        store.add(t, np.full((2, 2, 3), t, np.uint8))
        steps = store.steps
        assert len(steps) <= max_frames
        assert steps[0] == 0 and steps[-1] == t
        grid = steps[:-1]
        gaps = set(np.diff(grid).tolist())
        assert gaps <= {store.stride}  # first .. second-to-last on one uniform grid
        assert t == 0 or t - grid[-1] <= store.stride
        assert int(store.get(t)[0, 0, 0]) == t


def test_store_errors_and_sampling() -> None:
    store = FrameStore(encoding="raw")
    for t in range(10):
        store.add(t, np.full((2, 2, 3), t, np.uint8))
    with pytest.raises(ValueError, match="increase"):
        store.add(5, np.zeros((2, 2, 3), np.uint8))
    with pytest.raises(KeyError, match="no frame for step 42"):
        store.get(42)
    steps, frames = store.sample(4)
    assert steps[0] == 0 and steps[-1] == 9 and len(steps) == 4
    assert [int(f[0, 0, 0]) for f in frames] == steps
    assert uniform_indices(5, 10) == [0, 1, 2, 3, 4] and uniform_indices(0, 3) == []


def test_frame_cache_follows_episodes() -> None:
    env = FrameCache(SyntheticProgressEnv([[0, 10, 20, 30], [50, 60]]), max_frames=8)
    assert find_frame_store(gym.wrappers.TimeLimit(env, 3)) is env.frame_store
    env.reset()
    for _ in range(3):
        env.step(env.action_space.sample())
    store = env.get_wrapper_attr("frame_store")
    assert store.steps == [0, 1, 2, 3] and store.episode_id == 1
    assert int(store.get(3)[0, 0, 0]) == pytest.approx(grey_level(30), abs=1)
    env.reset()
    assert store.steps == [0] and store.episode_id == 2
    assert int(store.get(0)[0, 0, 0]) == pytest.approx(grey_level(50), abs=1)
    with pytest.raises(KeyError, match="camera key 'nope'"):
        FrameCache(SyntheticProgressEnv(), camera="nope").reset()


def horizon_env(stages, **kw) -> ProgressiveHorizon:
    base = SyntheticProgressEnv(
        [[0]], success_at=kw.pop("success_at", None), terminate_on_success=False
    )
    return ProgressiveHorizon(base, stages, **kw)


def episode_length(env: gym.Env) -> tuple[int, dict]:
    _, info = env.reset()
    n = 0
    while True:
        n += 1
        _, _, term, trunc, info = env.step(env.action_space.sample())
        if term or trunc:
            return n, info


def test_horizon_grows_by_episodes() -> None:
    env = horizon_env(
        [
            {"max_steps": 3},
            {"max_steps": 5, "after_episodes": 2},
            {"max_steps": 8, "after_episodes": 3},
        ]
    )
    lengths = [episode_length(env)[0] for _ in range(5)]
    assert lengths == [3, 3, 5, 8, 8]
    assert env.stage == 2 and env.episodes_seen == 5


def test_horizon_grows_by_success_rate() -> None:
    # success (at step 2) in every episode: the window of 2 fills, the rate 1.0 >= 0.5
    env = horizon_env(
        [{"max_steps": 3}, {"max_steps": 6, "min_success_rate": 0.5}],
        by="success_rate", window=2, success_at=2,
    )  # fmt: skip
    lengths = [episode_length(env)[0] for _ in range(4)]
    assert lengths == [3, 3, 6, 6]
    never = horizon_env([{"max_steps": 3}, {"max_steps": 6, "min_success_rate": 0.5}],
                        by="success_rate", window=2)  # fmt: skip
    assert [episode_length(never)[0] for _ in range(4)] == [3, 3, 3, 3]
    _, info = episode_length(never)
    assert info["max_episode_steps"] == 3 and info["horizon_stage"] == 0


def test_horizon_stage_validation() -> None:
    with pytest.raises(ValueError, match="must grow"):
        parse_stages([{"max_steps": 5}, {"max_steps": 5}])
    with pytest.raises(ValueError, match="unknown keys"):
        parse_stages([{"max_steps": 5, "steps": 1}])
    with pytest.raises(ValueError, match="at least one"):
        parse_stages([])
