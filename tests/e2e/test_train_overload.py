"""More rollout envs than the reward service admits: the run waits, every episode gets its answer.

A real service (mock backend, 50 ms a batch) that admits 8 requests at once and answers 503 with
``Retry-After`` past that; ``reach_place_async`` DistRL with 2 workers x 8 envs on
``calls: deferred``, whose clients ask for far more than 8 at once. Busy is backpressure: no
endpoint is marked down, no episode gets a fallback reward, and the run exits 0. (A killed
service still exits 4: tests/e2e/test_train_degraded.py.)
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place_async.yaml")


def _metrics(url: str) -> dict:
    """``GET /metrics``, waiting out a 503 (requests the finished run left in flight still hold
    the service's admission slots), as every client of an overloaded service does."""
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(url + "/metrics", timeout=10)
        if response.status_code != 503 or time.monotonic() > deadline:
            response.raise_for_status()
            return response.json()
        time.sleep(float(response.headers.get("Retry-After", "0.5")))


@pytest.mark.slow
def test_an_overloaded_service_makes_envs_wait_and_loses_no_reward(ray_local, tmp_path, capfd):
    from evolve_envs.cli.main import main
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    svc = EmbeddedService(
        "mock",
        {"rule": "reach_place", "latency_ms": 50},
        extra_args=["--max-concurrent-requests", "8"],
    ).start()
    run_dir = tmp_path / "out"
    try:
        rc = main(
            [
                "train",
                "--config",
                CONFIG,
                "--algo",
                "distrl",
                "--run-dir",
                str(run_dir),
                # the run ends on env steps, not on the clock: episodes last at most 40 steps
                # (`env.max_episode_steps`), so 640 env steps taken in are at least 16 whole
                # episodes however fast the machine is; the minutes are only a cap
                "--minutes",
                "3",
                "run.max_env_steps=640",
                "--no-progress-bar",
                f"reward_model.endpoint={svc.url}",
                "workers.num_workers=2",
                "workers.num_envs=8",
                "workers.num_cpus=0.01",
                "run.log_every_s=5",
            ]
        )
        status_codes = _metrics(svc.url)["status_codes"]
    finally:
        svc.stop()
    err = capfd.readouterr().err
    assert rc == 0, err
    assert "FALLBACK" not in err and "degraded" not in err
    with (run_dir / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["episodes"]) for r in rows) >= 16
    assert sum(int(r["fallback_episodes"]) for r in rows) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not summary.get("degraded")
    # the storm happened: the service turned requests away, and the clients waited them out
    assert status_codes.get("503", 0) > 0, status_codes
