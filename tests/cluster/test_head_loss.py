"""The head-node drill: the head of the cluster a run joined dies. The driver exits within
seconds with one line naming the cause and the way back; the last checkpoint loads, and
``--resume`` continues it on a new cluster. Runs on small clusters of its own (the drill ends the
cluster), not on the shared one."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evolve_envs.training.checkpoint import load_checkpoint
from tests.cluster.conftest import CLUSTER_OVERRIDES, RayTestCluster, train_command, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: one worker on the `sim` node, the learner on the head (`learner`), the embedded reward service
OVERRIDES = (
    *(o for o in CLUSTER_OVERRIDES if not o.startswith(("reward_model.", "workers.num_workers"))),
    "workers.num_workers=1",
    "run.checkpoint_every_updates=2",
    "run.head_timeout_s=3",
)


def test_losing_the_head_node_then_resuming_on_a_new_cluster(
    make_cluster: Callable[..., RayTestCluster], tmp_path: Path
) -> None:
    first = make_cluster({"sim-a": {"sim": 1.0}})
    run_dir = tmp_path / "run"
    cmd = train_command(first.address, run_dir, *OVERRIDES, "run.minutes=5")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(
            lambda: (
                (run_dir / "checkpoint.pt").is_file()
                and load_checkpoint(run_dir)["counters"]["updates"] >= 4
            ),
            120,
            "a checkpoint with 4 updates",
        )
        first.cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
        killed_at = time.monotonic()
        out, err = proc.communicate(timeout=60)
        exit_s = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    # the start-up line naming the reward model, the metrics rows, then one error line: no
    # traceback, no Ray noise
    lines = [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith(("[", "reward model "))
    ]
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]), err
    assert lines[0].startswith("evolve-envs train: error: lost the Ray cluster's head node")
    assert f"--resume {run_dir}" in lines[0]
    assert exit_s < 30  # the head timeout (3 s) plus the connection checks, not Ray's 60 s
    saved = load_checkpoint(run_dir)["counters"]["updates"]  # the last checkpoint loads

    second = make_cluster({"sim-a": {"sim": 1.0}})
    resume = train_command(second.address, run_dir, "run.max_updates=3")
    resume[resume.index("--config") : resume.index("--config") + 2] = ["--resume", str(run_dir)]
    resume.remove("--run-dir"), resume.remove(str(run_dir))
    run = subprocess.run(resume, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counters"]["updates"] >= saved + 3  # continued from the checkpoint
    assert summary["placement"]["learner"]["node_id"] == second.node_id("head")
    print(f"head node drill: driver exited {exit_s:.1f} s after the head died; resumed at {saved}")
