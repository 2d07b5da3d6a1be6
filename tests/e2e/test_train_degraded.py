"""A reward service killed mid-``train``: the run says so within one interval and exits 4."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from tests.e2e.test_train import SHORT_REACH_PLACE

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")


@pytest.mark.slow
def test_a_service_killed_mid_run_is_said_on_the_terminal_and_exits_4(ray_local, tmp_path, capfd):
    from evolve_envs.cli.main import main
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    svc = EmbeddedService("mock", {"rule": "reach_place"}).start()
    run_dir = tmp_path / "out"
    metrics = run_dir / "metrics.csv"
    quit_waiting = threading.Event()

    def kill_once_running() -> None:  # the first metrics row: the workers are collecting
        while not quit_waiting.wait(0.2):
            if metrics.is_file():
                os.kill(svc.pid, signal.SIGKILL)
                return

    killer = threading.Thread(target=kill_once_running, daemon=True)
    killer.start()
    try:
        rc = main(
            [
                "train",
                "--config",
                CONFIG,
                "--run-dir",
                str(run_dir),
                "--minutes",
                "0.3",
                "--no-progress-bar",
                f"reward_model.endpoint={svc.url}",
                "reward_model.timeout=2",
                "reward_model.max_retries=0",
                *SHORT_REACH_PLACE,
            ]
        )
    finally:
        quit_waiting.set()
        killer.join()
        svc.stop()
    err = capfd.readouterr().err
    assert rc == 4, err
    lines = err.splitlines()
    warned = [i for i, ln in enumerate(lines) if "warning: the reward service is failing" in ln]
    assert len(warned) == 1, err
    # said right after the first interval whose episodes got fallback rewards, not at the end
    flagged = [i for i, ln in enumerate(lines) if ln.startswith("[") and "FALLBACK" in ln]
    assert flagged and flagged[0] == warned[0] - 1, err
    assert "will exit 4" in lines[warned[0]]
    assert any(ln.startswith("degraded: ") and "fallback rewards" in ln for ln in lines), err
    with metrics.open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["fallback_episodes"]) for r in rows) >= 1
    assert any(float(r["fallback_share"] or 0) > 0 for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["degraded"]["episodes"] >= 1 and summary["degraded"]["steps"] >= 1
    # the run named the model the service reported, a stand-in saying so
    assert summary["reward_model_id"] == "mock-reach_place"
    assert any(ln.startswith("reward model mock-reach_place (the mock backend") for ln in lines)
    assert (run_dir / "checkpoint.pt").is_file()  # resumable once the service is back
