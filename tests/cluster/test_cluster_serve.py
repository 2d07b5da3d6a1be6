"""The shipped Serve config on the multi-node cluster: `serve deploy` put as many replicas as it
says on the `reward` nodes; the app answers over HTTP at a node's Serve proxy with the service's
own limits; rollout workers reach it through the Serve proxy of their own node
(`http://{node_ip}:PORT`) when the config says so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from evolve_envs.reward.clients import ProgressClient
from evolve_envs.reward.service.limits import ServiceLimits
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    SERVE_YAML,
    RayTestCluster,
    train_command,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_serve_deploy_puts_the_yaml_replica_count_on_reward_nodes(
    ray_cluster: RayTestCluster,
) -> None:
    app = yaml.safe_load(SERVE_YAML.read_text())["applications"][0]
    replicas = ray_cluster.replicas(app["name"])
    assert len(replicas) == app["args"]["replicas"] == 2
    reward_nodes = {ray_cluster.node_id("reward-a"), ray_cluster.node_id("reward-b")}
    assert {r["node_id"] for r in replicas} == reward_nodes


def test_the_app_answers_at_the_proxy_with_the_service_limits(ray_cluster: RayTestCluster) -> None:
    url = f"http://127.0.0.1:{ray_cluster.serve_port}"
    frame = np.zeros((32, 32, 3), np.uint8)
    with ProgressClient(url) as client:
        assert client.capabilities().value.backend == "mock"
        ok = client.pairwise_critic("put the block in the zone", frame, frame)
        assert ok.ok and ok.value == pytest.approx(0.0)
        # one character over the service's text limit: the same 422 as evolve-reward-server's
        too_long = "x" * (ServiceLimits().max_text_chars + 1)
        bad = ProgressClient(url, fail_on_request_error=False).pairwise_critic(
            too_long, frame, frame
        )
    assert not bad.ok and "422" in str(bad.error)


def test_workers_reach_the_serve_proxy_of_their_own_node(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / "http"
    overrides = [o for o in CLUSTER_OVERRIDES if not o.startswith("reward_model.endpoint")]
    endpoint = f"reward_model.endpoint=http://{{node_ip}}:{ray_cluster.serve_port}"
    cmd = train_command(ray_cluster.address, run_dir, *overrides, endpoint, "run.max_updates=2")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    transports = {v[-1]["reward"] for v in summary["placement"]["workers"].values()}
    assert len(transports) == 1
    (transport,) = transports
    # the node's own address (all nodes of this one-machine cluster share it), never the template
    assert transport.startswith("http://") and transport.endswith(f":{ray_cluster.serve_port}")
    assert "{node_ip}" not in transport and "127.0.0.1" not in transport
    assert summary["last"].get("fallbacks", 0) == 0  # every check answered
