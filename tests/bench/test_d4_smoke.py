"""Smoke test of D4 (env steps taken in with a slow reward model, with and without settled
episodes): two arms run for seconds end to end — one against the model on two services started
by the bench, with ``calls: deferred`` — and the report re-renders from the records alone.

It checks the records and the table have their fields; the numbers live in bench/RESULTS.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.bench_script import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def bench(*args: str | Path) -> str:
    return run_bench("d4_settled_intake.py", *args, timeout=400)


def test_d4_records_each_arm_and_the_ratio_to_the_instant_model(tmp_path: Path) -> None:
    out = tmp_path / "d4"
    bench("--algos", "distrl", "--arms", "instant", "slow_deferred_2x", "--minutes", "0.1",
          "--latency-ms", "50", "--out", out, "--runs", tmp_path / "runs")  # fmt: skip
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("r*.json")}
    assert set(records) == {"r0-distrl-instant", "r0-distrl-slow_deferred_2x"}
    deferred = records["r0-distrl-slow_deferred_2x"]
    assert "reward_model.calls=deferred" in deferred["overrides"]
    endpoint = next(o for o in deferred["overrides"] if o.startswith("reward_model.endpoint="))
    assert len(json.loads(endpoint.partition("=")[2])) == 2  # the two services it started
    for rec in records.values():
        assert rec["env_steps_in"] >= 0 and rec["load"] and rec["counters"]["updates"] >= 0
        assert {"worker_env_steps", "saturation_waits", "settled_episodes"} <= set(rec["workers"])
    assert deferred["workers"]["worker_env_steps"] > 0  # the workers played
    summary = (out / "summary.md").read_text()
    for text in ("slow_deferred_2x", "/ instant (per round)", "saturation waits", "load avg"):
        assert text in summary
    (out / "summary.md").unlink()
    bench("--report-only", "--out", out)
    assert (out / "summary.md").read_text() == summary
