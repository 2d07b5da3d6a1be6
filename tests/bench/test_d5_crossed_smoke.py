"""The cells and flags bench/plans/d5_crossed.md added to D5, without training: the two crossed
cells, ``d5_race.py --window --alone`` on synthetic records, and ``d5_throughput.py
--first-round --intake-from-min`` with the training replaced by a stand-in that writes a
metrics.csv (no Ray, no env)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.bench_script import run_bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _d5_cells  # noqa: E402
from _stats import bootstrap_ci, sign_flip_p  # noqa: E402

SEEDS = [700, 701, 702, 703, 704, 705]


def test_crossed_cells_take_the_block_config_and_the_system_override() -> None:
    cfg, over = _d5_cells.cell_config, _d5_cells.cell_overrides
    assert cfg("distrl_async_barrier").name == "reach_place_async.yaml"
    assert over("distrl_async_barrier") == ["distrl.barrier=true"]
    assert cfg("distrl_sync_free").name == "reach_place_sync.yaml"
    assert over("distrl_sync_free") == ["distrl.barrier=false"]
    # the existing cells as they were
    assert cfg("distrl_async").name == "reach_place_async.yaml"
    assert over("distrl_async") == ["distrl.barrier=false"]
    assert cfg("distrl_sync").name == "reach_place_sync.yaml"
    assert over("distrl_sync") == ["distrl.barrier=true"]
    assert cfg("grpo_async").name == "reach_place_async.yaml"
    for cell in ("distrl_async_barrier", "distrl_sync_free"):
        assert _d5_cells.CELLS[cell][0] == "distrl" and cell in _d5_cells.LABELS
        assert cfg(cell).is_file()
    # scripts not told which cells still run D5's 2×2
    assert _d5_cells.D5_CELLS == ["distrl_async", "distrl_sync", "grpo_sync", "grpo_async"]


def _curve(levels: list[float], end: float = 60_000) -> list[dict[str, float]]:
    """Snapshots every 10k env steps up to ``end`` with the given successes."""
    return [{"env_steps": 10_000.0 * (i + 1), "time_s": 60.0 * (i + 1), "success": v}
            for i, v in enumerate(levels) if 10_000.0 * (i + 1) <= end]  # fmt: skip


def _write(folder: Path, cell: str, seed: int, curve: list[dict[str, float]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"cell": cell, "seed": seed, "regime": "slow", "curve": curve, "sampled_last": [],
           "runs_at_once": 4, "scene_offset": 700_000}  # fmt: skip
    (folder / f"{cell}-s{seed}.json").write_text(json.dumps(rec))


def test_report_window_pairs_and_the_sharing_rule(tmp_path) -> None:
    out, alone = tmp_path / "crossed", tmp_path / "alone"
    # window [40k, 60k] = the mean of the 40k and 50k snapshots' successes (each holds 10k)
    base = [0.0, 0.1, 0.2]
    async_free = {s: [*base, 0.2, 0.4, 0.4] for s in SEEDS}  # window 0.3
    async_bar = {s: [*base, 0.4 + 0.01 * i, 0.6, 0.6] for i, s in enumerate(SEEDS)}  # 0.5+0.005i
    sync_bar = {s: [*base, 0.5, 0.5, 0.5] for s in SEEDS}  # window 0.5
    sync_free = {s: [*base, 0.5, 0.5, 0.5] for s in SEEDS}
    for cell, curves in (("distrl_async", async_free), ("distrl_async_barrier", async_bar),
                         ("distrl_sync", sync_bar), ("distrl_sync_free", sync_free)):  # fmt: skip
        for s in SEEDS:
            _write(out / "runs", cell, s, _curve(curves[s]))
    # a run that stops at 50k: no window value, its pair left out and counted
    _write(out / "runs", "distrl_sync_free", 705, _curve(sync_free[705], end=50_000))
    # alone: distrl_async seed 700 0.2 above shared (over 0.15), seed 701 0.05 above
    _write(alone / "runs", "distrl_async", 700, _curve([*base, 0.4, 0.6, 0.6]))
    _write(alone / "runs", "distrl_async", 701, _curve([*base, 0.3, 0.4, 0.4]))
    # learner intake alone per cell (d5_throughput.py --intake-from-min), for minutes to 30 %
    tp = tmp_path / "tp"
    tp.mkdir()
    for cell, rate in (("distrl_async", 20.0), ("distrl_async_barrier", 10.0),
                       ("distrl_sync", 5.0), ("distrl_sync_free", 10.0)):  # fmt: skip
        rec = {"cell": cell, "regime": "slow", "env_steps_per_s": 99.0,
               "intake_from_min": 2, "intake_env_steps_per_s": rate}  # fmt: skip
        (tp / f"{cell}-r0.json").write_text(json.dumps(rec))
    text = run_bench("d5_race.py", "--regime", "slow", "--report-only", "--out", out,
                     "--at-steps", 20000, 40000, 60000, "--window", 40000, 60000,
                     "--alone", alone, "--throughput", tp)  # fmt: skip
    # async block: barrier at 40k ÷ 10/s, no barrier at 50k ÷ 20/s: 1.6 in every seed
    row = next(line for line in text.splitlines() if "distrl_async_barrier ÷ distrl_async" in line)
    assert "1.6 [1.6, 1.6] p=0.0312" in row, row
    # sync block: 40k ÷ 5/s over 40k ÷ 10/s, the stopped run's pair left out
    row = next(line for line in text.splitlines() if "distrl_sync ÷ distrl_sync_free" in line)
    assert "2 [2, 2] p=0.0625" in row and row.endswith("| 1 |"), row
    # exact window means per run
    row = next(line for line in text.splitlines() if "(distrl_async_barrier) |" in line)
    assert "700: 0.5, 701: 0.505, 702: 0.51" in row, row
    row = next(line for line in text.splitlines() if "(distrl_async) |" in line)
    assert "700: 0.3, 701: 0.3" in row, row
    # the barrier in the async block: +0.2 + 0.005 i, 6 seeds all positive
    d = [0.2 + 0.005 * i for i in range(6)]
    lo, hi = bootstrap_ci(d, seed=1)
    p = sign_flip_p(d)
    assert p == pytest.approx(0.03125)
    row = next(line for line in text.splitlines() if "barrier, async block" in line)
    assert f"+0.212 [{lo:+.3g}, {hi:+.3g}] p={p:.3g} (n=6)" in row and "| shown |" in row, row
    # the sync block: zero difference over the 5 seeds that reached 60k, one pair left out
    row = next(line for line in text.splitlines() if "barrier, sync block" in line)
    assert "+0 [+0, +0] p=1 (n=5)" in row and "not shown" in row and row.endswith("| 1 |"), row
    assert "interaction" in text and "block (sync − async), barrier" in text
    assert "distrl_sync_free seed 705 (50000 env steps)" in text
    assert "is not shown in general" in text
    # alone − shared: values, and the plan's 0.15 rule
    assert "distrl_async seed 700 | +0.2 |" in text and "distrl_async seed 701 | +0.05 |" in text
    assert "composed minutes are not supported (1 alone − shared window difference(s)" in text
    # without the alone run over 0.15 the rule does not fire
    _write(alone / "runs", "distrl_async", 700, _curve([*base, 0.3, 0.4, 0.4]))
    text = run_bench("d5_race.py", "--regime", "slow", "--report-only", "--out", out,
                     "--window", 40000, 60000, "--alone", alone,
                     "--throughput", tmp_path / "none")  # fmt: skip
    assert "not supported" not in text and "no alone − shared window difference exceeds" in text
    # without the flags, no crossed or alone section
    plain = run_bench("d5_race.py", "--regime", "slow", "--report-only", "--out", out,
                      "--throughput", tmp_path / "none")  # fmt: skip
    assert "Crossed pairs" not in plain and "Alone − shared" not in plain


def test_throughput_first_round_and_intake_from_min(tmp_path, monkeypatch) -> None:
    import _d3_runs
    import d5_throughput

    def fake_train(config, algo, run_dir, minutes, seed, timeout, overrides):  # noqa: ANN001, ANN202
        run_dir = Path(run_dir)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(
            {"distrl": {"barrier": "distrl.barrier=true" in overrides}, "grpo": {},
             "workers": {"num_workers": 2}, "reward_model": {}}))  # fmt: skip
        (run_dir / "metrics.csv").write_text(
            "time_s,worker_env_steps,paused_s,env_steps_in\n"
            "60,600,0,100\n130,1500,0,400\n300,3000,0,1250\n"
        )
        return {}

    monkeypatch.setattr(d5_throughput, "train_run", fake_train)
    monkeypatch.setattr(_d3_runs, "ray_init", lambda n: None)
    out = tmp_path / "tp"
    args = ["--regime", "instant", "--minutes", "0.01", "--rounds", "1", "--seed", "706",
            "--out", str(out), "--runs", str(tmp_path / "runs")]  # fmt: skip
    d5_throughput.main([*args, "--first-round", "1", "--intake-from-min", "2",
                        "--cells", "distrl_sync", "distrl_sync_free"])  # fmt: skip
    names = sorted(p.name for p in (out / "instant").glob("*.json"))
    assert names == ["distrl_sync-r1.json", "distrl_sync_free-r1.json"]
    rec = json.loads((out / "instant" / "distrl_sync_free-r1.json").read_text())
    assert rec["round"] == 1 and "distrl.barrier=false" in rec["overrides"]
    # workers' own count kept: 3000 / 300; intake from minute 2 (row at 60 s) to the end
    assert rec["env_steps_per_s"] == 10.0
    assert (rec["intake_from_s"], rec["intake_env_steps"], rec["intake_seconds"]) == (
        60.0,
        1150.0,
        240.0,
    )
    assert rec["intake_env_steps_per_s"] == pytest.approx(1150 / 240)
    # a default part: round 0, no intake in the record
    d5_throughput.main([*args, "--cells", "distrl_async"])
    rec0 = json.loads((out / "instant" / "distrl_async-r0.json").read_text())
    assert rec0["round"] == 0 and "intake_env_steps_per_s" not in rec0
    summary = (out / "d5_throughput_instant.md").read_text()
    assert "learner intake env steps/s from minute 2 (median)" in summary
    assert "4.8 (n=1)" in summary
