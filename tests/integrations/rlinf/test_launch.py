"""The documented RLinf launch on a machine without CUDA, end to end.

``python -m evolve_envs.integrations.rlinf.launch SCRIPT --config-path evolve_envs/configs/rlinf
--config-name libero_10_grpo_openvlaoft`` with RLinf 0.3.0's config groups on Hydra's search path,
real Ray, real LIBERO envs in the env worker and the real reward server (mock backend). Without
CUDA the launch must start the ``ProgressEnvWorker`` group, build the wrapped LIBERO envs, step
them through one chunk with reward-model checks, then stop before RLinf's actor and rollout
workers with a message and exit status 3, never running the training script and never printing
a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EMBODIED = Path(__file__).resolve().parent / "rlinf_embodiment"

pytestmark = pytest.mark.slow


def launch(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """Run the documented launch command on this (CUDA-less) machine."""
    pytest.importorskip("rlinf.workers.env.env_worker")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the launch would start training")
    script = tmp_path / "train_embodied_agent.py"
    script.write_text("raise SystemExit('the training script must not run without CUDA')\n")
    env = {
        **os.environ,
        "EMBODIED_PATH": str(EMBODIED),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "RAY_ADDRESS": "local",  # a private Ray instance, never a running one
        "RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION": "0.01",
        "RAY_DEDUP_LOGS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "evolve_envs.integrations.rlinf.launch",
        str(script),
        "--config-path",
        str(REPO / "evolve_envs" / "configs" / "rlinf"),
        "--config-name",
        "libero_10_grpo_openvlaoft",
        f"runner.logger.log_path={tmp_path}/results",
        *overrides,
    ]
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420, check=False
    )


@pytest.mark.libero
def test_cpu_launch_stops_after_the_progress_env_workers(mock_service, tmp_path):
    proc = launch(
        tmp_path,
        # Two LIBERO envs (GRPO needs groups of two or more), one env worker.
        "env.train.total_num_envs=2",
        "env.train.group_size=2",
        "algorithm.group_size=2",
        f"env.train.reward_model.endpoint={mock_service.url}",
        # Checks at steps 2, 4, 6, 8 of the one chunk (8 actions) the check steps.
        "env.train.reward_model.start_step=2",
        "env.train.reward_model.call_every=2",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out[-4000:]  # the env side works; training did not start
    assert "must not run" not in out
    assert "Traceback" not in out, out[-4000:]
    assert "no CUDA device, so the launch stopped before the actor and rollout workers" in out
    assert "1 ProgressEnvWorker(s) in group 'EnvGroup'" in out
    assert "RecordVideo > RLinfProgressReward > LiberoEnv" in out
    assert mock_service.url in out
    assert "reward-model calls [4, 4]" in out


def test_cpu_launch_reports_a_config_rlinf_refuses_in_one_line(tmp_path):
    proc = launch(tmp_path, "algorithm.group_size=1")  # GRPO needs groups of two or more
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("rlinf_launch (no CUDA device, env side only): failed while validating")
    assert "AssertionError" in last
