"""The CleanRL-style PPO example trains on settled rows (``calls: deferred``): with the same
seeds it learns from exactly the data ``calls: sync`` gives it, so both runs end with the same
weights; with model dones ending episodes it trains and leaves the cut rows out."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture()
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    try:
        yield importlib.import_module("ppo_settled")
    finally:
        sys.modules.pop("ppo_settled", None)


def test_deferred_training_equals_sync_training(example: ModuleType) -> None:
    # the model's done is audited, not acted on: both runs play the same steps
    block = {"terminate_on_done": False}
    runs = {
        calls: example.train(
            iterations=3, envs=2, steps=40, seed=3, calls=calls, reward_model=block
        )
        for calls in ("sync", "deferred")
    }
    sync, deferred = runs["sync"], runs["deferred"]
    assert len(sync.returns) == len(deferred.returns) >= 4  # 50-step episodes, 120 steps x 2
    assert sync.returns == deferred.returns
    assert any(r != 0.0 for r in sync.returns)  # the reward model paid something
    for a, b in zip(sync.agent.parameters(), deferred.agent.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.manual_seed(3)  # the weights both runs started from (train() seeds, then builds)
    initial = example.Agent(3, 2)
    moved = [
        not torch.equal(a, b)
        for a, b in zip(initial.parameters(), sync.agent.parameters(), strict=True)
    ]
    assert any(moved)


def test_training_with_model_dones_leaves_cut_rows_out(example: ModuleType) -> None:
    # a done threshold the policy's early progress reaches: the model ends episodes
    result = example.train(
        iterations=3,
        envs=2,
        steps=40,
        seed=0,
        calls="deferred",
        reward_model={"done_threshold": 0.05},
    )
    returns = np.array(result.returns)
    assert len(returns) > 4 and np.isfinite(returns).all()
    assert result.cut_steps > 0  # episodes the model ended while they went on
    assert result.valid_rows <= 3 * 2 * 40 - result.cut_steps  # the cut rows are out
