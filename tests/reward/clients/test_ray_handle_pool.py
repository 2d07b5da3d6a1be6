"""RayHandlePool outside a Ray cluster (no Ray started by these tests)."""

from __future__ import annotations

import subprocess
import sys


def test_without_ray_init_it_fails_fast_and_starts_no_ray() -> None:
    code = (
        "import ray\n"
        "from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool\n"
        "from evolve_envs.reward.clients.errors import RewardServiceError\n"
        "try:\n"
        "    RayHandlePool('ray://reward', max_retries=0).request('GET', '/health')\n"
        "except RewardServiceError as exc:\n"
        "    print('ERR', exc.kind, exc.cause)\n"
        "print('INIT', ray.is_initialized())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    ).stdout
    assert "ERR connect" in out and "call ray.init(address=...) first" in out, out
    assert "INIT False" in out, out
