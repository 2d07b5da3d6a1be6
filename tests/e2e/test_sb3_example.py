"""The Stable-Baselines3 example trains PPO through SubprocVecEnv with rewards from the mock
reward service, and every episode's rewards telescope to its final progress."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_ppo_trains_through_subprocesses_and_rewards_telescope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the subprocess envs import the example module by name
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH")) if p)
    )
    example = importlib.import_module("sb3_ppo_reach_place")
    try:
        # a mock service started by the example; a check every 5 steps keeps the test short
        model, ledger = example.train(
            timesteps=2560, envs=2, seed=1, reward_model={"call_every": 5}
        )
    finally:
        sys.modules.pop("sb3_ppo_reach_place", None)
    assert model.num_timesteps >= 2560
    returns, progress = np.array(ledger.returns), np.array(ledger.final_progress)
    assert len(returns) >= 2560 // 50 - 2  # 50-step episodes (fewer when they succeed early)
    assert progress.max() > 0  # the service scored something
    np.testing.assert_allclose(returns, progress / 100, atol=1e-5)
    assert len(ledger.env_success) == len(returns)  # the env's own flag, beside the model's number


def test_reach_place_state_space_is_bounded() -> None:
    from evolve_envs.envs.synthetic import ReachPlaceEnv

    env = ReachPlaceEnv()
    space = env.observation_space["state"]
    assert np.isfinite(space.low).all() and np.isfinite(space.high).all()
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(200):  # the gripper pushed against every wall stays inside the bounds
        obs, *_ = env.step(rng.choice([-1.0, 1.0], size=2).astype(np.float32))
        assert space.contains(obs["state"]), obs["state"]
