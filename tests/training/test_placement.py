"""GPU placement: the config's GPU shares become Ray resource requests (fake GPUs, CPU box)."""

from __future__ import annotations

import pytest

from evolve_envs import load_train_config
from evolve_envs.training.loop import learner_device, reserve_learner_gpus
from evolve_envs.training.worker_start import start_workers
from tests.e2e.test_train import TOY


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


def test_check_placeable_names_the_key_and_what_the_nodes_have() -> None:
    from evolve_envs.training.runtime.placement import PlacementError, check_placeable

    nodes = [{"CPU": 2.0, "memory": 1e9, "node:10.0.0.1": 1.0}]
    gpu = load_train_config(TOY, overrides=["learner.num_gpus=1"])  # the driver's learner
    with pytest.raises(PlacementError) as err:
        check_placeable(gpu, nodes)
    text = str(err.value)
    assert "\n" not in text and "can hold the learner (GPU: 1)" in text
    assert "learner.num_gpus=1, the most GPU any node has is 0" in text
    assert "the nodes have {CPU: 2}" in text  # what the cluster has, without Ray's bookkeeping
    sim = load_train_config(TOY, overrides=["workers.resources={sim: 1}"])
    with pytest.raises(PlacementError, match=r"workers\.resources\.sim=1, the most sim any node"):
        check_placeable(sim, nodes)
    check_placeable(gpu, [*nodes, {"CPU": 1.0, "GPU": 1.0}])  # a node with a GPU: it fits


def test_a_learner_gpu_on_a_gpu_less_machine_is_refused_before_ray_starts(tmp_path) -> None:
    """One line, exit status 2, nothing written, and no wait for Ray's autoscaler (the local
    Ray a run would start is known before it starts)."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "gpu"
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.cli.main", "train", "--config", "reach_place",
         "--run-dir", str(run_dir), "learner.num_gpus=1"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # no GPU, whatever the machine has
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("evolve-envs train: error: no node of the local Ray this run starts")
    assert "learner.num_gpus=1, the most GPU any node has is 0" in line
    assert "Started a local Ray instance" not in proc.stderr and not run_dir.exists()
