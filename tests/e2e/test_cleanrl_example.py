"""The CleanRL-style PPO example trains on ``gym.make("evolve_envs/ReachPlace-v0")`` with no
arguments: a few iterations report episodes that end (the registered limit, or the model's done)
and whose returns come from the reward model."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_a_few_ppo_iterations_report_episode_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("cleanrl_ppo_reach_place")
    try:
        args = example.Args(num_envs=2, num_steps=50, total_timesteps=2 * 2 * 50)
        episodes = example.train(args)
    finally:
        sys.modules.pop("cleanrl_ppo_reach_place", None)
    assert len(episodes) >= 4  # 50-step episodes at most, in two sub-envs, two iterations
    assert all(1 <= length <= 50 for _, _, length in episodes)
    assert any(ret != 0 for _, ret, _ in episodes)  # the reward model paid something
