"""Vector envs over the registered ReachPlace id in both autoreset modes: ``make_vec``,
``gym.make_vec``, and ``gym.vector.SyncVectorEnv`` and ``AsyncVectorEnv`` of ``gym.make`` calls.
The reward model's info keys arrive every step, each episode's summary arrives once, on its last
step (under ``final_info`` in ``SAME_STEP``), and ``RecordEpisodeStatistics`` and
``NormalizeReward`` on top count the same episodes and returns as the rewards the envs paid.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from evolve_envs import make_vec  # importing the package registers the ids

ID = "evolve_envs/ReachPlace-v0"
LIMIT = 5
SHORT = ["reach_place", {"env": {"max_episode_steps": LIMIT}}]
STEPS = 2 * LIMIT + 2  # two whole episodes per sub-env, whatever the mode
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]


def _build(kind: str, mode: AutoresetMode) -> gym.vector.VectorEnv:
    if kind == "make_vec":
        return make_vec(SHORT, num_envs=2, vector_kwargs={"autoreset_mode": mode})
    if kind == "gym.make_vec":  # the registered vector entry point
        return gym.make_vec(ID, num_envs=2, config=SHORT, autoreset_mode=mode.value)
    thunks = [lambda: gym.make(ID, config=SHORT)] * 2
    if kind == "sync":
        return gym.vector.SyncVectorEnv(thunks, autoreset_mode=mode)
    return gym.vector.AsyncVectorEnv(thunks, autoreset_mode=mode, context="fork")


def _actions(steps: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (steps, 2, 2)).astype(np.float32)


def _play(vec: gym.vector.VectorEnv, mode: AutoresetMode) -> dict:
    """Steps the vector env; per sub-env: episode summaries, returns paid, steps per episode."""
    vec.reset(seed=[0, 1])
    summaries: list[list[int]] = [[], []]
    returns: list[list[float]] = [[], []]
    running, just_ended = np.zeros(2), np.zeros(2, bool)
    for action in _actions(STEPS):
        _, reward, terminated, truncated, info = vec.step(action)
        ended = terminated | truncated
        final = info.get("final_info", {}) if mode is AutoresetMode.SAME_STEP else info
        keys = final if ended.any() else info  # the reward model's keys, on every paid step
        assert {"progress_calls", "reward_model_reward"} <= keys.keys() or just_ended.all()
        mask = final.get("_episode_reward_model", np.zeros(2, bool))
        assert (mask == ended).all()  # a summary exactly where an episode ends
        for i in np.flatnonzero(ended):
            summaries[i].append(int(final["episode_reward_model"]["steps"][i]))
        skip = just_ended if mode is AutoresetMode.NEXT_STEP else np.zeros(2, bool)
        assert (reward[skip] == 0).all()  # NEXT_STEP's reset step pays nothing
        running += np.where(skip, 0.0, reward)
        for i in np.flatnonzero(ended):
            returns[i].append(running[i])
            running[i] = 0.0
        just_ended = ended
    return {"summaries": summaries, "returns": returns}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("kind", ["make_vec", "gym.make_vec", "sync", "async"])
def test_summaries_and_info_keys(kind: str, mode: AutoresetMode) -> None:
    vec = _build(kind, mode)
    try:
        played = _play(vec, mode)
    finally:
        vec.close()
    assert played["summaries"] == [[LIMIT, LIMIT], [LIMIT, LIMIT]]
    assert any(r != 0 for env in played["returns"] for r in env)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_episode_statistics_and_normalized_rewards(mode: AutoresetMode) -> None:
    plain = _build("make_vec", mode)
    try:
        paid = _play(plain, mode)["returns"]
    finally:
        plain.close()
    vec = _build("make_vec", mode)
    stats = gym.wrappers.vector.RecordEpisodeStatistics(vec)
    wrapped = gym.wrappers.vector.NormalizeReward(stats)
    try:
        wrapped.reset(seed=[0, 1])
        episodes: list[list[tuple[float, int]]] = [[], []]
        for action in _actions(STEPS):
            _, reward, _, _, info = wrapped.step(action)
            assert np.isfinite(reward).all()
            if "episode" in info:
                stat = info["episode"]
                for i in np.flatnonzero(info["_episode"]):
                    episodes[i].append((float(stat["r"][i]), int(stat["l"][i])))
    finally:
        wrapped.close()
    assert [[length for _, length in env] for env in episodes] == [[LIMIT, LIMIT]] * 2
    for i in range(2):
        assert [r for r, _ in episodes[i]] == pytest.approx(paid[i], abs=1e-5)
