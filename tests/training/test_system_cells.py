"""The two new cells of the algorithm × system 2×2, each switched by one knob: DistRL with a
synchronous barrier (``distrl.barrier``) and GRPO with overlapped rounds (``grpo.overlap``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from evolve_envs.training.config import load_train_config
from evolve_envs.training.driver import TrainOptions, run_train
from tests.e2e.test_train import TOY

WINNERS = Path(__file__).parents[2] / "bench" / "results" / "d5_tune" / "winners.json"


def _run(tmp_path, algo: str, *overrides: str):
    opts = TrainOptions(
        config=[TOY],
        algo=algo,
        run_dir=tmp_path / algo,
        progress_bar=False,
        log=io.StringIO(),
        overrides=["workers.num_workers=2", "run.log_every_s=0.2", *overrides],
    )
    return run_train(opts)


@pytest.mark.slow
@pytest.mark.parametrize("barrier", [False, True])
def test_the_barrier_knob_stops_distrl_workers_while_the_learner_trains(
    ray_local, tmp_path, barrier
):
    res = _run(tmp_path, "distrl", "run.max_updates=6", f"distrl.barrier={barrier}")
    c, row = res.counters, res.last_metrics
    assert c["updates"] >= 6
    if barrier:
        # every barrier waited for both workers to stop, and they sat it out
        assert 1 <= row["barriers"] <= c["updates"]
        assert row["worker_pauses"] >= 2 * (row["barriers"] - 1)
    else:
        assert row["barriers"] == 0 and row["worker_pauses"] == 0 and row["paused_s"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [False, True])
def test_the_overlap_knob_plays_round_k_plus_1_while_round_k_trains(ray_local, tmp_path, overlap):
    res = _run(tmp_path, "grpo", "run.max_updates=8", "grpo.epochs=1", f"grpo.overlap={overlap}")
    c = res.counters
    assert c["rounds"] >= 3
    if overlap:
        # every round trained while the next was played; all but the first were one version
        # stale (their ratio taken against the behaviour log-probs)
        assert c["overlapped_rounds"] == c["rounds"]
        assert c["max_lag"] == 1
        assert c["stale_episodes"] == c["episodes"] - c["episodes"] // c["rounds"]
    else:
        assert c["overlapped_rounds"] == c["stale_episodes"] == c["max_lag"] == 0


@pytest.mark.parametrize("system", ["async", "sync"])
def test_each_cell_is_a_named_config_holding_its_tuned_block(system):
    name = f"reach_place_{system}"
    distrl, grpo = (load_train_config(name, overrides=[f"algo={a}"]) for a in ("distrl", "grpo"))
    assert grpo.grpo.overlap is (system == "async")
    assert distrl.distrl.barrier is (system == "sync")
    # the blocks are D5's tuning winners for this system, as committed with the tuning's records
    winners = json.loads(WINNERS.read_text())["winners"]
    for algo, block in (("distrl", distrl.distrl), ("grpo", grpo.grpo)):
        knobs = winners[f"{algo}_{system}"]["knobs"]
        assert {k: getattr(block, k.split(".")[1]) for k in knobs} == knobs, algo
