"""DistRL and GRPO on the multi-node cluster: `evolve-envs train --address` joins it, rollout
workers spread over the two `sim` nodes, the learner runs on the `learner` node, rewards come from
the Serve app (deployed from the shipped YAML onto the `reward` nodes) by handle, and the cluster
is still up after the driver exits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    RayTestCluster,
    cluster_overrides,
    train_command,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.parametrize("algo", ["distrl", "grpo"])
def test_train_places_workers_on_sim_nodes_and_the_learner_on_its_node(
    ray_cluster: RayTestCluster, tmp_path: Path, algo: str
) -> None:
    run_dir = tmp_path / algo
    cmd = train_command(ray_cluster.address, run_dir, *cluster_overrides(algo), "run.max_updates=3")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:] + (run_dir / "train.log").read_text()[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counters"]["updates"] >= 3  # the learner's update count advanced
    placement = summary["placement"]
    assert placement["learner"]["node_id"] == ray_cluster.node_id("head")  # the `learner` node
    workers = {int(k): v[-1] for k, v in placement["workers"].items()}
    assert sorted(workers) == [0, 1]
    sim_nodes = {ray_cluster.node_id("sim-a"), ray_cluster.node_id("sim-b")}
    assert {w["node_id"] for w in workers.values()} == sim_nodes  # one worker on each sim node
    assert {w["reward"] for w in workers.values()} == {"handle:reward"}  # no HTTP on the way
    # the metrics lines of the learner's task reached the user's terminal through the driver
    assert "updates" in run.stdout + run.stderr
    # the driver disconnected; it did not stop the cluster it joined
    assert ray_cluster.replicas() and ray_cluster.cluster.head_node.remaining_processes_alive()


def test_a_request_no_node_can_meet_is_one_line(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    cmd = train_command(
        ray_cluster.address,
        tmp_path / "run",
        *CLUSTER_OVERRIDES,
        "workers.resources={gpu_sim: 1}",
        "run.max_updates=1",
    )
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert "no node of the Ray cluster can hold a rollout worker" in lines[0]
    assert "gpu_sim: 1" in lines[0] and "sim: 1" in lines[0]  # what was asked, what nodes have
