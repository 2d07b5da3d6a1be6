"""Vector envs with autoreset: frames and progress never leak across episodes.

Three sub-envs built by ``gym.make_vec`` through the registered id (so kwargs go through
``make_env``) play different scripts with different lengths, so their episodes end at different
steps and auto-resets interleave.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import evolve_envs  # noqa: F401  (registers the ids)
from tests.helpers.synthetic_env import SyntheticProgressEnv, grey_level

SCRIPTS = [
    [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 96],  # progress-done at step 10
    [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60],  # truncated at 12
    [0, 30, 60, 20, 50, 10, 40, 70],  # env success at step 7
]
SUCCESS_AT = [None, None, 7]
RM = {"enable": True, "start_step": 2, "call_every": 2, "milestone_every": 4}


def check_values(script: list[float], last: int) -> set[float]:
    return {0.0} | {float(script[min(t, len(script) - 1)]) for t in range(2, last + 1, 2)}


@pytest.mark.parametrize("mode", ["pairwise", "trajectory"])
def test_make_vec_autoreset_keeps_episodes_apart(mock_service, mode: str) -> None:
    vec = gym.make_vec(
        "evolve_envs/LIBERO-10-v0",
        num_envs=3,
        vectorization_mode="sync",
        env_factory=SyntheticProgressEnv,
        scripts=SCRIPTS,
        success_at=SUCCESS_AT,
        seed_selects_script=True,
        max_episode_steps=12,
        reward_model={**RM, "endpoint": mock_service.url, "mode": mode},
    )
    try:
        _, infos = vec.reset(seed=0)  # sub-env i starts with script i
        returns = np.zeros(3)
        finished: list[tuple[int, float, float]] = []  # (script, return, final progress)
        resetting = np.zeros(3, dtype=bool)
        for _ in range(60):
            _, rewards, terms, truncs, infos = vec.step(vec.action_space.sample())
            for i in range(3):
                base = vec.envs[i].unwrapped
                script = base.script
                kept = vec.envs[i].get_wrapper_attr("tracker").kept_frames
                # every frame the tracker keeps belongs to the sub-env's current episode
                assert min(kept) == 0 and max(kept) <= base.t
                for s, frame in kept.items():
                    level = int(frame[0, 0, 0])
                    assert abs(level - grey_level(base.progress_at(s))) <= 1, (i, s)
                if resetting[i]:  # NEXT_STEP autoreset: this call was the reset
                    assert rewards[i] == 0.0 and infos["progress"][i] == 0.0
                    assert base.t == 0 and len(kept) == 1
                    returns[i] = 0.0
                    continue
                assert infos["progress"][i] in check_values(script, base.t), (i, base.t)
                returns[i] += rewards[i]
                if terms[i] or truncs[i]:
                    finished.append((base.episode % 3, returns[i], infos["progress"][i]))
            resetting = np.logical_or(terms, truncs)
        assert {k for k, _, _ in finished} == {0, 1, 2}
        for k, ret, final in finished:
            assert ret == pytest.approx(final / 100.0, abs=1e-9), k
            end = {0: 10, 1: 12, 2: 7}[k]
            last_check = end if end % 2 == 0 else end - 1
            assert final == pytest.approx(SCRIPTS[k][last_check]), k
    finally:
        vec.close()


def test_async_vector_env_episode_returns(mock_service) -> None:
    def make(i: int):
        def thunk() -> gym.Env:
            from evolve_envs import make_env

            return make_env(
                env_factory=SyntheticProgressEnv,
                scripts=[SCRIPTS[i]],
                success_at=SUCCESS_AT[i],
                max_episode_steps=12,
                reward_model={**RM, "endpoint": mock_service.url},
            )

        return thunk

    vec = gym.vector.AsyncVectorEnv([make(i) for i in range(3)])
    try:
        vec.reset(seed=0)
        returns, done_once = np.zeros(3), np.zeros(3, dtype=bool)
        finals = np.zeros(3)
        for _ in range(13):
            _, rewards, terms, truncs, infos = vec.step(vec.action_space.sample())
            returns += np.where(done_once, 0.0, rewards)
            ended = np.logical_or(terms, truncs) & ~done_once
            finals[ended] = infos["progress"][ended]
            done_once |= ended
        assert done_once.all()
        assert returns == pytest.approx([0.96, 0.60, 0.40])
        assert finals == pytest.approx([96, 60, 40])
    finally:
        vec.close()


def test_make_vec_answers_call_and_get_attr_of_its_sub_envs() -> None:
    """The service-owning wrapper forwards the VectorEnv attribute calls that gymnasium's
    VectorWrapper leaves out (the rollout CLI reads the task through them)."""
    from evolve_envs import make_vec

    vec = make_vec("reach_place", 2, vectorization_mode="sync", max_episode_steps=4)
    try:
        assert vec.call("has_wrapper_attr", "spec") == (True, True)
        assert vec.call("has_wrapper_attr", "no_such_attr") == (False, False)
        vec.set_attr("marker", [1, 2])
        assert vec.get_attr("marker") == (1, 2)
    finally:
        vec.close()
