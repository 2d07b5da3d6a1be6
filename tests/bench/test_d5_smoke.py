"""Smoke test of D5: the ASHA tuning of one cell per algorithm and the race of all four cells
of the 2×2, each for seconds end to end, then re-rendered from their records alone.

It checks the records, the shared budget and the reports have their fields; it asserts nothing
about learning (seconds of training learn nothing).
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.bench_script import run_bench as bench

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["env.max_episode_steps=10", "workers.num_envs=2"]
TUNE = ["--samples", "2", "--max-env-steps", "300", "--rungs", "2", "--rf", "2",
        "--snapshot-every-s", "1", "--eval-episodes", "2", "--concurrent", "1"]  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_tuning_runs_asha_per_cell_on_one_shared_budget(tmp_path) -> None:
    pytest.importorskip("ray.tune")
    out, runs = tmp_path / "tune", tmp_path / "runs"
    for cell in ("distrl_sync", "grpo_async"):
        bench("d5_tune.py", "--cell", cell, *TUNE, "--out", out, "--runs", runs, *SMALL)
    budget = json.loads((out / "budget.json").read_text())
    assert budget["max_env_steps"] == 300 and budget["scheduler"]["name"] == "ASHA"
    assert budget["scheduler"]["grace_period"] == 150
    for cell in ("distrl_sync", "grpo_async"):
        trials = [json.loads(p.read_text()) for p in sorted((out / "trials").glob(f"{cell}-*"))]
        assert [t["trial"] for t in trials] == [0, 1]
        assert (
            f"{'distrl.barrier' if cell == 'distrl_sync' else 'grpo.overlap'}=true"
            in (trials[0]["overrides"])
        )
        for t in trials:
            assert "error" not in t and t["curve"] and t["load"]["samples"]
            row = t["curve"][-1]
            assert 0 <= row["heldout_progress"] <= 1 and math.isfinite(row["heldout_return"])
            assert row["env_steps"] > 0
    grpo = json.loads((out / "trials" / "grpo_async-t0.json").read_text())["knobs"]
    assert (grpo["grpo.lr"], grpo["grpo.epochs"], grpo["grpo.groups_per_round"]) == (1e-3, 4, 2)
    # another budget may not run into the same records
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "d5_tune.py"), "--cell",
                           "grpo_sync", *TUNE[:2], "--max-env-steps", "999", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode != 0 and "another budget" in proc.stderr
    summary = (out / "d5_tune_summary.md").read_text()
    for text in ("ASHA on held-out progress", "**(winner)**", "the same for every cell"):
        assert text in summary, text
    (out / "d5_tune_summary.md").unlink()
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("reach_place_async.yaml", "reach_place_sync.yaml"):
        shutil.copy(ROOT / "evolve_envs" / "configs" / "distrl" / name, configs / name)
    bench("d5_tune.py", "--report-only", "--out", out, "--write-configs", configs)
    assert (out / "d5_tune_summary.md").read_text() == summary
    # the winners shipped into the named configs, each into its own cell's block
    from evolve_envs.training.config import load_train_config

    winners = json.loads((out / "winners.json").read_text())["winners"]
    for cell, system, block in (
        ("distrl_sync", "sync", "distrl"),
        ("grpo_async", "async", "grpo"),
    ):
        cfg = load_train_config(configs / f"reach_place_{system}.yaml", {"algo": block})
        knobs = winners[cell]["knobs"]
        assert {k: getattr(getattr(cfg, block), k.split(".")[1]) for k in knobs} == knobs
        assert (
            f"D5 tuning winners: {cell} trial"
            in (configs / f"reach_place_{system}.yaml").read_text()
        )
    # a cell whose part did not finish (no marker: interrupted) gets no winner
    marker = json.loads((out / "cells" / "grpo_async.json").read_text())
    assert marker["terminated"] + marker["errors"] == marker["trials"] == 2
    (out / "cells" / "grpo_async.json").unlink()
    bench("d5_tune.py", "--report-only", "--out", out)
    assert set(json.loads((out / "winners.json").read_text())["winners"]) == {"distrl_sync"}
    assert "part that did not finish; no winner" in (out / "d5_tune_summary.md").read_text()


def test_an_interrupted_part_goes_on_with_resume(tmp_path) -> None:
    pytest.importorskip("ray.tune")
    out, runs = tmp_path / "tune", tmp_path / "runs"
    longer = [*TUNE[:2], "--max-env-steps", "2000", *TUNE[4:]]  # the first trial is still running
    cmd = [sys.executable, str(ROOT / "bench" / "d5_tune.py"), "--cell", "distrl_sync", *longer,
           "--out", str(out), "--runs", str(runs), *SMALL]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    first = out / "trials" / "distrl_sync-t0.json"
    deadline = time.monotonic() + 300
    while not (first.is_file() and (runs / "parts" / "distrl_sync.json").is_file()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # Ctrl-C while the first trial runs
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0, log[-3000:]
    assert not (out / "cells" / "distrl_sync.json").exists()
    # a fresh part may not run into the records of the interrupted one
    refused = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "--resume it, or move them away" in refused.stderr
    bench("d5_tune.py", *cmd[2:], "--resume")
    marker = json.loads((out / "cells" / "distrl_sync.json").read_text())
    assert marker["terminated"] + marker["errors"] == marker["trials"] == 2
    trials = [json.loads(p.read_text()) for p in sorted((out / "trials").glob("distrl_sync-*"))]
    assert [t["trial"] for t in trials] == [0, 1] and all(t["curve"] for t in trials)
    assert trials[0].get("restarts") == 1  # started again from nothing, its first run kept
    assert len(list(runs.glob("*/distrl_sync-t0.attempt1"))) == 1


def test_race_scores_every_cell_on_steps_and_minutes(tmp_path) -> None:
    out = tmp_path / "race"
    args = ["--seeds", "1", "--first-seed", "100", "--max-env-steps", "300", "--minutes", "0.5",
            "--at-steps", "100", "300", "--at-minutes", "0.1", "0.5", "--eval-episodes", "2",
            "--snapshot-every-s", "1", "--out", out, "--runs", tmp_path / "runs",
            "--runs-at-once", "2", *SMALL]  # fmt: skip
    bench("d5_race.py", *args)
    for cell in ("distrl_async", "distrl_sync", "grpo_sync", "grpo_async"):
        rec = json.loads((out / "runs" / f"{cell}-s100.json").read_text())
        assert rec["cell"] == cell and rec["curve"] and rec["load"]["samples"]
        assert rec["runs_at_once"] == 2
        assert len(rec["sampled_last"]) == min(3, len(rec["curve"]))
    summary = (out / "d5_race_summary.md").read_text()
    for text in ("steps 300", "min 0.5", "AUC (env steps)", "AUC (minutes)", "steps to 30 %",
                 "min to 50 %", "last 3 (mean action)", "last 3 (sampled)", "bootstrap",
                 "sign-flip p", "DistRL, synchronous barrier − GRPO, synchronous rounds",
                 "load avg (1 min)", "direct / composed",
                 "direct − composed, every run", "at once: 2 (4 runs)"):  # fmt: skip
        assert text in summary, text
    assert (out / "d5_race.png").stat().st_size > 0
    (out / "d5_race_summary.md").unlink()
    bench("d5_race.py", "--report-only", "--out", out, "--at-steps", "100", "300",
          "--at-minutes", "0.1", "0.5")  # fmt: skip
    assert (out / "d5_race_summary.md").read_text() == summary
    # the composition takes each run's rate from stage 1's runs of the same block only
    thr = tmp_path / "thr"
    thr.mkdir()
    for cell in ("distrl_async", "distrl_sync", "grpo_sync", "grpo_async"):
        block = json.loads((out / "runs" / f"{cell}-s100.json").read_text())["block"]
        rec = {"cell": cell, "regime": "instant", "block": block, "env_steps_per_s": 123.0}
        (thr / f"{cell}-r0.json").write_text(json.dumps(rec))
    other = {**rec, "block": {**block, "grpo": {**block["grpo"], "epochs": 99}}}
    (thr / "grpo_async-r1.json").write_text(json.dumps({**other, "env_steps_per_s": 999.0}))
    (thr / "distrl_sync-r1.json").write_text(json.dumps({"cell": "distrl_sync",
                                                         "regime": "instant",
                                                         "env_steps_per_s": 999.0}))  # fmt: skip
    bench("d5_race.py", "--report-only", "--out", out, "--throughput", thr, "--at-steps", "100",
          "300", "--at-minutes", "0.1", "0.5")  # fmt: skip
    composed = (out / "d5_race_summary.md").read_text().split("Wall clock")[1]
    assert composed.count("123 env steps/s") == 4 and "999 env steps/s" not in composed
    assert "direct − composed, DistRL, synchronous barrier" in composed
    paired = composed.split("Paired on the composed wall clock")[1]
    assert "min to 30 %: second ÷ first" in paired and "never = its end" in paired
    assert "DistRL, asynchronous workers − GRPO, synchronous rounds (n=1)" in paired


def test_throughput_rates_each_cell_with_its_load(tmp_path) -> None:
    """The slow regime (a slower reward model, workers of mixed speed), two cells, one round."""
    out = tmp_path / "thr"
    args = ["--regime", "slow", "--latency-ms", "50", "--step-ms", "5", "--rounds", "1",
            "--minutes", "0.15", "--cells", "distrl_async", "distrl_sync", "--out", out,
            "--runs", tmp_path / "runs", *SMALL]  # fmt: skip
    bench("d5_throughput.py", *args)
    recs = {c: json.loads((out / "slow" / f"{c}-r0.json").read_text())
            for c in ("distrl_async", "distrl_sync")}  # fmt: skip
    for rec in recs.values():
        assert rec["env_steps_per_s"] > 0 and rec["load"]["samples"]
    assert recs["distrl_async"]["block"]["distrl"]["barrier"] is False
    assert recs["distrl_sync"]["block"]["distrl"]["barrier"] is True
    assert recs["distrl_async"]["paused_share"] == 0
    assert recs["distrl_sync"]["paused_share"] > 0  # the barrier really stopped the workers
    summary = (out / "d5_throughput_slow.md").read_text()
    assert "÷ DistRL async" in summary and "load avg (1 min)" in summary
    (out / "d5_throughput_slow.md").unlink()
    bench("d5_throughput.py", "--regime", "slow", "--report-only", "--out", out)
    assert (out / "d5_throughput_slow.md").read_text() == summary
