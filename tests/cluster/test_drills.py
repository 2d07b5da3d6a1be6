"""Node-failure drills on the multi-node cluster (docs/cluster.md describes them and their
numbers).

* A `sim` node dies mid-training: DistRL goes on with the other worker and keeps logging its
  loss; the episodes that were under way on the dead node are counted as lost (never half in the
  replay); a new `sim` node gets the restarted worker; the checkpoint loads throughout.
* A `reward` node dies while episodes call the Serve app: calls in flight fail over to the other
  replica within the call budget, every episode's rewards still sum to its final progress, and
  the counters say what happened; a new `reward` node gets the replica back.

Each drill leaves the cluster as it found it (a replacement node takes the dead one's role).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from evolve_envs.training.checkpoint import load_checkpoint
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    RayTestCluster,
    metrics_rows,
    read_json,
    train_command,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
HERE = Path(__file__).resolve().parent


def _worker_on(placement: dict[str, Any], node_id: str) -> str | None:
    for worker, incarnations in placement["workers"].items():
        if incarnations[-1]["node_id"] == node_id:
            return worker
    return None


def _updates(run_dir: Path) -> int:
    rows = metrics_rows(run_dir)
    return int(rows[-1]["updates_total"]) if rows else 0


def test_losing_a_worker_node_mid_training(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = train_command(
        ray_cluster.address,
        run_dir,
        *CLUSTER_OVERRIDES,
        "run.minutes=0.6",
        "run.checkpoint_every_updates=4",
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        placement = wait_for(
            lambda: (p := read_json(run_dir / "placement.json")) and len(p["workers"]) == 2 and p,
            120,
            "both workers to start",
        )
        doomed = ray_cluster.node_id("sim-b")
        victim = _worker_on(placement, doomed)
        assert victim is not None, placement  # SPREAD put one worker on each sim node
        wait_for(lambda: _updates(run_dir) >= 3, 120, "the first updates")

        ray_cluster.kill("sim-b")
        killed_at, updates_at_kill = time.time(), _updates(run_dir)
        # training goes on with the other worker: updates advance and the loss is logged
        wait_for(lambda: _updates(run_dir) >= updates_at_kill + 6, 60, "updates after the kill")
        row = metrics_rows(run_dir)[-1]
        assert row["loss"] not in ("", "nan")
        # the checkpoint written after the kill loads
        wait_for(lambda: (run_dir / "checkpoint.pt").is_file(), 30, "a checkpoint")
        assert load_checkpoint(run_dir)["counters"]["updates"] >= 4

        # a new sim node joins: the restarted worker is placed on it
        new_node = ray_cluster.add("sim-c", {"sim": 1.0}).node_id
        rejoined = wait_for(
            lambda: (
                (p := read_json(run_dir / "placement.json"))
                and p["workers"][victim][-1]["node_id"] == new_node
                and p
            ),
            60,
            "the lost worker to restart on the new node",
        )
        rejoin_s = time.time() - killed_at
        assert [w["node_id"] for w in rejoined["workers"][victim]] == [doomed, new_node]
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    # every env of the dead worker had an episode under way: 2 lost, none half-inserted
    rows = metrics_rows(run_dir)
    assert int(rows[-1]["worker_restarts"]) == 1
    assert int(rows[-1]["lost_episodes"]) == 2
    assert summary["counters"]["updates"] > updates_at_kill + 6
    assert load_checkpoint(run_dir)["counters"]["updates"] == summary["counters"]["updates"]
    print(f"worker node drill: lost 2 episodes, worker back on the new node after {rejoin_s:.1f} s")


def _episodes(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_losing_a_reward_replica_node(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    stop = tmp_path / "STOP"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "drill_rollout.py"), ray_cluster.address, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def episodes_so_far() -> list[dict[str, Any]]:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line:
            lines.append(line)
        elif proc.poll() is not None:
            pytest.fail(f"the rollout driver exited: {proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        return _episodes(lines)

    try:
        wait_for(lambda: len(episodes_so_far()) >= 2, 120, "episodes before the kill", every=0)
        ray_cluster.kill("reward-b")
        killed_at = time.time()
        wait_for(
            lambda: sum(e["t_start"] > killed_at for e in episodes_so_far()) >= 3,
            120,
            "episodes after the kill",
            every=0,
        )
        wait_for(lambda: len(ray_cluster.replicas()) == 1, 60, "Serve to drop the dead replica")
        stop.touch()
        out, err = proc.communicate(timeout=120)
        lines.extend(out.splitlines())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    episodes = _episodes(lines)
    across = [e for e in episodes if e["t_start"] <= killed_at <= e["t_end"]]
    after = [e for e in episodes if e["t_start"] > killed_at]
    for e in episodes:  # no episode's reward sum breaks: it telescopes to the final progress
        assert e["reward_sum"] == pytest.approx(e["progress"] / 100.0, abs=1e-6), e
        assert e["fallbacks"] == e["errors"]  # every failed call is a counted fallback
    assert all(e["answers"] == e["calls"] > 0 and e["errors"] == 0 for e in after)
    # failover: the slowest call of any episode stayed inside the call budget
    from tests.cluster.drill_rollout import CALL_BUDGET_S

    slowest = max(e["latency_max_s"] for e in episodes)
    assert slowest < CALL_BUDGET_S
    # calls that were in flight on the dead replica, if any, were retried (counted, printed below)
    failed = sum(e["errors"] for e in episodes)
    print(
        f"reward node drill: {len(across)} episode(s) across the kill, slowest call "
        f"{slowest:.2f} s, {episodes[-1]['retries_total']} retried call(s), {failed} "
        f"fallback(s), {len(after)} clean episodes after"
    )
    # a new reward node joins: Serve puts the second replica back on it
    new_node = ray_cluster.add("reward-c", {"reward": 1.0}).node_id
    wait_for(
        lambda: (
            new_node in {r["node_id"] for r in ray_cluster.replicas()}
            and len(ray_cluster.replicas()) == 2
        ),
        120,
        "the replica to come back on the new reward node",
    )
