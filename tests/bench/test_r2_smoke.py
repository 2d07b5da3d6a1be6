"""Smoke test of R2 (a progress model fitted here): every phase for seconds end to end on tiny
recordings, into a temporary folder, then the report from the records alone.

It checks the records have their fields; the numbers live in bench/RESULTS.md ("R2").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.bench_script import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def r2(*args: str | Path) -> str:
    return run_bench("r2_fitted_reward.py", *args)


def test_every_phase_writes_its_record(tmp_path: Path) -> None:
    out, runs = tmp_path / "r2", tmp_path / "runs"
    where = ["--out", out, "--runs", runs]
    r2("record", "--scale", "0.1", *where)
    assert (runs / "held_out").is_dir() and (runs / "train-big-astray").is_dir()
    assert "exists; kept" in r2("record", "--scale", "0.1", *where)  # a recording is not redone
    # the default fit and the three ``endings`` judges with: the done gap, done on frames (x2)
    for fit in ([], ["--done-gap"], ["--data", "train-big", "--done-on", "frame"],
                ["--data", "train-big-astray", "--done-on", "frame"]):  # fmt: skip
        r2("fit", "--epochs", "1", *fit, *where)
    fits = {p.name for p in out.glob("fit*.json")}
    assert fits == {"fit.json", "fit-model-gap.json", "fit-model-big-frame.json",
                    "fit-model-big-astray-frame.json"}  # fmt: skip
    assert json.loads((out / "fit.json").read_text())["parameters"] > 0
    r2("calibrate", "latency", "alarm", "separation", "--seconds", "0.5", "--alarm-episodes", "2",
       "--separation-episodes", "2", *where)  # fmt: skip
    cal = json.loads((out / "calibrate.json").read_text())
    assert set(cal["services"]) == {"fitted", "mock:reach_place", "mock:reach_place_hackable",
                                    "mock:random"}  # fmt: skip
    assert {"fitted|1", "fitted|8"} <= set(json.loads((out / "latency.json").read_text())["rows"])
    assert json.loads((out / "alarm.json").read_text())["groups"]
    sep = json.loads((out / "separation.json").read_text())["rows"]
    assert {"fitted", "fitted_gap", "fitted_big_frame", "fitted_astray_frame"} == set(sep)
    assert all(0 <= row["near_miss_judged_done"] <= 2 for row in sep.values())
    r2("distrl", "--arms", "fitted", "sparse", "--seeds", "1", "--minutes", "0.3",
       "--env-steps", "300", "--eval-episodes", "2", "--set", "env.max_episode_steps=10",
       "workers.num_envs=2", "run.snapshot_every_s=1", *where)  # fmt: skip
    for arm in ("fitted", "sparse"):
        rec = json.loads((out / f"distrl-{arm}-s0.json").read_text())
        assert rec["curve"] and Path(rec["run_dir"]).is_relative_to(runs)
        assert (rec["model"] is None) == (arm == "sparse")
    r2("sampled", "endings", "--arms", "fitted", "sparse", "--eval-episodes", "2", *where)
    assert len(json.loads((out / "distrl-fitted-s0.json").read_text())["sampled_last3"]) >= 1
    ends = json.loads((out / "endings.json").read_text())["rows"]
    assert set(ends) == {"distrl-fitted-s0", "distrl-sparse-s0"}
    assert "failed_judged_done" in ends["distrl-fitted-s0"]
    judges = set(ends["distrl-sparse-s0"]["failed_done_far_by"])
    assert judges == {"fitted_big_frame", "fitted_astray_frame"}  # the judges, not its own
    assert "equal env steps" in r2("report", *where)
