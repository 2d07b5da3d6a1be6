"""GPU placement: the config's GPU shares become Ray resource requests (fake GPUs, CPU box)."""

from __future__ import annotations

import pytest

from evolve_envs.train.config import load_train_config
from evolve_envs.train.loop import learner_device, reserve_learner_gpus
from evolve_envs.train.worker import start_workers
from tests.distrl.test_train import TOY


def test_workers_and_learner_get_the_gpu_shares_the_config_asks_for(ray_local):
    ray = ray_local
    if ray.cluster_resources().get("GPU", 0) < 2:
        pytest.skip("the session's Ray was started without the fake GPUs")
    cfg = load_train_config(TOY, overrides=["workers.num_gpus=0.25", "learner.num_gpus=1"])
    pg = reserve_learner_gpus(cfg)
    workers = start_workers(cfg, None, None)
    try:
        placements = ray.get([w.placement.remote() for w in workers])
        assert [p["resources"].get("GPU") for p in placements] == [0.25, 0.25]
        assert all(p["resources"].get("CPU") == cfg.workers.num_cpus for p in placements)
        # the GPU share is accounted; inference runs on CUDA only where torch sees a GPU
        import torch

        expected = "cuda" if torch.cuda.is_available() else "cpu"
        assert {p["device"] for p in placements} == {expected}
        table = ray.util.placement_group_table(pg)
        assert table["state"] == "CREATED" and table["bundles"] == {0: {"GPU": 1.0}}
        assert learner_device(cfg).type == expected
    finally:
        for w in workers:
            ray.kill(w, no_restart=True)
        ray.util.remove_placement_group(pg)
    assert reserve_learner_gpus(load_train_config(TOY)) is None  # learner.num_gpus: 0
