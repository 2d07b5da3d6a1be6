"""The two new cells of the algorithm × system 2×2, each switched by one knob: DistRL with a
synchronous barrier (``learner.barrier``) and GRPO with overlapped rounds (``grpo.overlap``)."""

from __future__ import annotations

import io

import pytest

from evolve_envs.train.config import load_train_config
from evolve_envs.train.driver import TrainOptions, run_train
from tests.e2e.test_train import TOY


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
    res = _run(tmp_path, "distrl", "run.max_updates=6", f"learner.barrier={barrier}")
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


@pytest.mark.parametrize("name", ["reach_place_async", "reach_place_sync"])
def test_each_cell_is_a_named_config(name):
    cfg = load_train_config(name)
    assert cfg.grpo.overlap is (name == "reach_place_async")
    assert cfg.learner.barrier is (name == "reach_place_sync")
    assert (cfg.grpo.lr, cfg.grpo.epochs) == (1e-3, 4)  # the hand-changed block that learns
