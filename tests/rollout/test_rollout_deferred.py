"""``evolve-envs rollout`` on a config with ``calls: deferred``: it rolls out with ``async`` calls
and reports the rewards ``sync`` pays (ReachPlace, the embedded mock service
with its *change* rule, a seeded random policy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve_envs.cli.rollout import RolloutOptions, run_rollout


def _rollout(out: Path, calls: str) -> dict:
    run_rollout(
        RolloutOptions(
            config="reach_place", episodes=2, out=out, max_steps=20, policy="random",
            video=False, tensorboard=False, progress_bar=False,
            overrides=[f"reward_model.calls={calls}", "reward_model.call_every=4",
                       "reward_model.embedded_backend_kwargs.latency_ms=20",
                       "reward_model.embedded_backend_kwargs.rule=change"],
        )
    )  # fmt: skip
    return json.loads((out / "summary.json").read_text())


def test_a_deferred_config_rolls_out_async_with_the_sync_rewards(tmp_path: Path) -> None:
    sync = _rollout(tmp_path / "sync", "sync")
    deferred = _rollout(tmp_path / "deferred", "deferred")
    assert json.dumps(deferred).count('"calls": "async"') >= 1  # the effective config says so
    assert '"calls": "deferred"' not in json.dumps(deferred)
    rows = [(e["steps"], e["reward_sum"]) for e in deferred["episodes"]]
    assert rows == [
        (e["steps"], pytest.approx(e["reward_sum"], abs=1e-9)) for e in sync["episodes"]
    ]
    assert all(e["reward_model_calls"] > 0 for e in deferred["episodes"])
    assert any(e["reward_sum"] != 0 for e in deferred["episodes"])  # the model paid something
