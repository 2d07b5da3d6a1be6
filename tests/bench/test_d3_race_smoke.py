"""Smoke test of D3's race: tuning (Ray Tune) and the race (slow regime) each run for
seconds end to end, then re-render from their records alone.

It checks the records and the reports have their fields; it asserts nothing about learning
(seconds of training learn nothing) — the numbers live in bench/RESULTS.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.helpers.bench_script import run_bench

TINY = ["--minutes", "0.05", "--eval-episodes", "2", "--snapshot-every-s", "1"]
SMALL_ENV = ["env.max_episode_steps=10", "workers.num_envs=2"]

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def bench(script: str, *args: str | Path) -> str:
    return run_bench(script, *args, timeout=400)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tuning trial per arm; the winners written to a config of its own."""
    pytest.importorskip("ray.tune")
    tmp = tmp_path_factory.mktemp("d3")
    paths = {"out": tmp / "tune", "config": tmp / "tuned.yaml", "runs": tmp / "runs"}
    bench("d3_tune.py", "--trials", "1", *TINY, "--out", paths["out"], "--config-out",
          paths["config"], "--runs", paths["runs"], *SMALL_ENV)  # fmt: skip
    return paths


def test_tuning_records_trials_and_writes_a_config_both_algorithms_train_from(tuned) -> None:
    from evolve_envs import load_train_config

    records = {a: json.loads((tuned["out"] / "trials" / f"{a}-t0.json").read_text())
               for a in ("distrl", "grpo")}  # fmt: skip
    for arm, rec in records.items():
        assert rec["trial"] == 0 and rec["seeds"] == [1000] and "error" not in rec
        assert math.isfinite(rec["auc"]) and 0 <= rec["auc"] <= 1
        [run] = rec["runs"]
        assert run["algo"] == arm and run["scene_offset"] == 100_000 and run["curve"]
        assert run["load"]["samples"] and run["counters"]["updates"] >= 0
    space = json.loads((tuned["out"] / "space.json").read_text())
    assert space["distrl"]["distrl.lr"] == space["grpo"]["grpo.lr"]
    summary = (tuned["out"] / "d3_tune_summary.md").read_text()
    for text in ("Search space", "**(winner)**", "tuning AUC", "load avg (1 min)"):
        assert text in summary
    text = tuned["config"].read_text()
    assert "NOT TUNED YET" not in text and "winners: DistRL prioritized: trial 0" in text
    for algo in ("distrl", "grpo"):
        cfg = load_train_config(tuned["config"], overrides=[f"algo={algo}"])
        knobs = records[algo]["knobs"]
        assert {k: getattr(getattr(cfg, algo), k.split(".")[1]) for k in knobs} == knobs
    # the report re-renders from the records alone
    (tuned["out"] / "d3_tune_summary.md").unlink()
    bench("d3_tune.py", "--report-only", "--out", tuned["out"], "--config-out", tuned["config"])
    assert (tuned["out"] / "d3_tune_summary.md").read_text() == summary


def test_race_records_both_metrics_and_the_paired_statistics(tuned, tmp_path) -> None:
    """The slow regime (the instant one is the same code without its overrides, and the
    tuning stage above trains in it): three workers of mixed speed, a slow reward model."""
    regime, out, first = "slow", tmp_path / "slow", 200
    bench("d3_race.py", "--regime", regime, "--seeds", "1", *TINY, "--latency-ms", "50",
          "--step-ms", "5", "--config", tuned["config"], "--out", out, "--runs",
          tmp_path / "runs", *SMALL_ENV)  # fmt: skip
    for arm, algo in (("distrl_prioritized", "distrl"), ("grpo", "grpo")):
        rec = json.loads((out / "runs" / f"{arm}-s{first}.json").read_text())
        assert rec["algo"] == algo and rec["regime"] == regime and rec["tuned"] is True
        assert rec["scene_offset"] == 0 and rec["eval_episodes"] == 2 and rec["curve"]
        assert {"time_s", "env_steps", "success"} <= set(rec["curve"][-1])
        assert 0 <= rec["final_sampled"] <= 1 and rec["load"]["samples"]
        delays = rec["block"]["workers"]["step_delay_s"]
        assert delays == [0.005, 0.005, 0.015]
        assert rec["block"]["reward_model.embedded_backend_kwargs"]["latency_ms"] == 50
    summary = (out / "d3_race_summary.md").read_text()
    for text in ("final success (mean action)", "final success (sampled actions)", "AUC",
                 "min to 30 %", "min to 50 %", "env steps", "95 % bootstrap",
                 "sign-flip p (exact, two-sided)", "DistRL prioritized − GRPO",
                 f"regime {regime}", "load avg (1 min)"):  # fmt: skip
        assert text in summary, text
    assert (out / "d3_race.png").stat().st_size > 0
    (out / "d3_race_summary.md").unlink()
    bench("d3_race.py", "--regime", regime, "--report-only", "--out", out)
    assert (out / "d3_race_summary.md").read_text() == summary
