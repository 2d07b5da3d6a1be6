"""One real multi-node Ray cluster on this machine, started once for every test in this folder.

``ray.cluster_utils.Cluster`` starts real raylets, each with its own resources and object store
(the way Ray's own tests run several nodes on one box):

* ``head`` — 1 CPU, ``{learner: 1}``, the dashboard (``serve deploy`` talks to it);
* ``sim-a``, ``sim-b`` — 1 CPU and ``{sim: 1}`` each: rollout workers;
* ``reward-a``, ``reward-b`` — 1 CPU and ``{reward: 1}`` each: reward replicas.

The pytest process never connects to it (other folders' tests start a local Ray in this
process): drivers run as subprocesses — ``evolve-envs train --address ...``, ``serve deploy``,
the drill scripts — exactly as a user runs them against a cluster. Node deaths are detected within
about 1.5 s (health checks every 0.5 s, 3 misses).

The shipped Serve config ``evolve_envs/configs/serve/cluster.yaml`` is deployed once with
``serve deploy`` (its HTTP port moved to a free one, and ``insecure_no_token: true``: the
replicas refuse a public proxy without a token, and these tests are about placement, not
access; tests/reward/service/hosting/ray_serve covers the token on a public proxy).

Ray's own token authentication is off for this cluster, on purpose (``RAY_AUTH_MODE=disabled``
while this folder runs; every node listens on 127.0.0.1). Ray turns it on in a process's
environment at that process's first local ``ray.init()``, so without the setting the cluster's
mode would depend on which tests ran before in the same pytest worker, and the dashboard answers
401 to a request without the token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.helpers.svc_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVE_YAML = ROOT / "evolve_envs" / "configs" / "serve" / "cluster.yaml"
MB = 1024**2
#: faster node-death detection than Ray's default (health checks every 3 s, 5 misses)
SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
NODES = {
    "sim-a": {"sim": 1.0},
    "sim-b": {"sim": 1.0},
    "reward-a": {"reward": 1.0},
    "reward-b": {"reward": 1.0},
}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


@dataclass
class RayTestCluster:
    """The running cluster: its GCS address, dashboard URL and nodes by name."""

    cluster: Any
    address: str
    dashboard: str
    nodes: dict[str, Any] = field(default_factory=dict)
    serve_port: int = 0

    def node_id(self, name: str) -> str:
        return self.nodes[name].node_id

    def add(self, name: str, resources: dict[str, float], num_cpus: int = 1) -> Any:
        """Start (or restart) node ``name`` with ``resources``."""
        node = self.cluster.add_node(
            num_cpus=num_cpus, resources=resources, object_store_memory=80 * MB
        )
        self.nodes[name] = node
        return node

    def kill(self, name: str) -> None:
        """Kill node ``name`` at once (no graceful shutdown: a crash)."""
        node = self.nodes.pop(name)
        self.cluster.remove_node(node, allow_graceful=False)

    def serve_applications(self) -> dict[str, Any]:
        url = f"{self.dashboard}/api/serve/applications/"
        return httpx.get(url, timeout=10).json().get("applications", {})

    def replicas(self, app: str = "reward") -> list[dict[str, Any]]:
        """The RUNNING replicas of the app's deployment (node_id, actor_id, ...)."""
        deployments = self.serve_applications().get(app, {}).get("deployments", {})
        return [
            r
            for d in deployments.values()
            for r in d.get("replicas", [])
            if r.get("state") == "RUNNING"
        ]


def _start_cluster(node_names: dict[str, dict[str, float]], dashboard: bool) -> RayTestCluster:
    from ray.cluster_utils import Cluster

    port = free_port()
    head: dict[str, Any] = {
        "num_cpus": 1,
        "resources": {"learner": 1.0},
        "object_store_memory": 80 * MB,
        "include_dashboard": dashboard,
        "_system_config": SYSTEM_CONFIG,
    }
    if dashboard:
        head["dashboard_port"] = port
    cluster = Cluster(initialize_head=True, connect=False, head_node_args=head)
    rc = RayTestCluster(cluster, cluster.address, f"http://127.0.0.1:{port}")
    try:
        rc.nodes["head"] = cluster.head_node
        for name, resources in node_names.items():
            rc.add(name, resources)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return rc


@pytest.fixture(scope="package", autouse=True)
def _ray_auth_off() -> Iterator[None]:
    """``RAY_AUTH_MODE=disabled`` for this folder's clusters and the drivers they start."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        yield


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayTestCluster]:
    """The five-node cluster (see the module docstring), with the shipped Serve config
    deployed."""
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed (serve extra)")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("a multi-node cluster on one machine needs at least 2 CPUs")
    rc = _start_cluster(NODES, dashboard=True)
    try:
        wait_for(
            lambda: _dashboard_up(rc.dashboard), 60, "the head's dashboard (serve deploy needs it)"
        )
        rc.serve_port = deploy_serve_yaml(rc, SERVE_YAML)
        yield rc
    finally:
        rc.cluster.shutdown()


@pytest.fixture()
def make_cluster() -> Iterator[Callable[..., RayTestCluster]]:
    """Start an extra small cluster (for a drill that ends the cluster); all are shut down at
    the end of the test."""
    started: list[RayTestCluster] = []

    def start(nodes: dict[str, dict[str, float]] | None = None) -> RayTestCluster:
        rc = _start_cluster(nodes or {}, dashboard=False)
        started.append(rc)
        return rc

    yield start
    for rc in started:
        rc.cluster.shutdown()


def _dashboard_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def deploy_serve_yaml(rc: RayTestCluster, path: Path) -> int:
    """``serve deploy`` of the Serve config at ``path`` (HTTP port moved to a free one) on the
    cluster; waits until its application is RUNNING and returns the port."""
    config = yaml.safe_load(path.read_text())
    port = free_port()
    config["http_options"]["port"] = port
    for app in config["applications"]:  # a one-machine test cluster: no token (see above)
        app.setdefault("args", {})["insecure_no_token"] = True
    copy = Path(os.environ.get("TMPDIR", "/tmp")) / f"serve-{port}.yaml"
    copy.write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [str(BIN / "serve"), "deploy", str(copy), "--address", rc.dashboard],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    names = [a["name"] for a in config["applications"]]

    def running() -> bool:
        apps = rc.serve_applications()
        return all(apps.get(n, {}).get("status") == "RUNNING" for n in names)

    wait_for(running, 120, f"Serve applications {names} to be RUNNING")
    return port


def train_command(address: str, run_dir: Path, *overrides: str, config: str = "reach_place"):
    """``evolve-envs train`` against the cluster at ``address``, as a user types it."""
    return [
        str(BIN / "evolve-envs"),
        "train",
        "--address",
        address,
        "--config",
        config,
        "--run-dir",
        str(run_dir),
        "--no-progress-bar",
        *overrides,
    ]


#: a small run on ReachPlace: workers on `sim` nodes (spread), the learner on the `learner` node,
#: rewards from the Serve app `reward` by handle.
_CLUSTER_SHAPE = (
    "reward_model.endpoint=ray://reward",
    "workers.resources={sim: 1}",
    "workers.scheduling=spread",
    "workers.num_workers=2",
    "workers.num_envs=2",
    "workers.num_cpus=0.5",
    "learner.placement=cluster",
    "learner.resources={learner: 1}",
    "learner.num_cpus=0.5",
    "env.max_episode_steps=10",
    "run.log_every_s=1",
)


def cluster_overrides(algo: str = "distrl") -> tuple[str, ...]:
    """The small cluster run for ``algo``, with that algorithm's small batches (each algorithm
    refuses the other's keys)."""
    block = {
        "distrl": ("distrl.min_buffer=2", "distrl.batch_size=2"),
        "grpo": ("algo=grpo", "grpo.group_size=2"),
    }
    return (*_CLUSTER_SHAPE, *block[algo])


#: the small DistRL run on the cluster
CLUSTER_OVERRIDES = cluster_overrides("distrl")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    import csv

    try:
        with open(run_dir / "metrics.csv", newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []
