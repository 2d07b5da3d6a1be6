"""The flags bench/plans/r2_confirm.md added to ``bench/r2_fitted_reward.py``, at tiny sizes:
``--scene-offset`` (distrl, sampled, endings), ``report --window``, ``separation --behaviours
--probe-seed``, and the two scripted exploits it probes (``play_behaviours``' ``oscillate`` and
``on_distractor``), which must end with the block outside the zone."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.envs.synthetic import (
    HALF_SIZES,
    ON_DISTRACTOR_SHIFT,
    ReachPlaceEnv,
    play_behaviours,
)
from evolve_envs.reward.service.backends import scene_rules
from tests.helpers.bench_script import run_bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _stats import ratio_ci  # noqa: E402

#: the plan's probe scenes (reset seeds from 60 000) and some of the recordings' (from 0)
SEEDS = [*range(60_000, 60_040), *range(40)]


def r2(*args: str | Path) -> str:
    return run_bench("r2_fitted_reward.py", *args)


class _Ends(gym.Wrapper):
    """Keeps, per step, where the block is against the zone, and the episode's last info."""

    def reset(self, **kwargs):  # noqa: ANN003, ANN201
        self.trace: list[tuple[float, float]] = []
        self.distractor = None
        out = self.env.reset(**kwargs)
        self.distractor = self.env.unwrapped.positions()["distractor"]
        return out

    def step(self, action):  # noqa: ANN001, ANN201
        out = self.env.step(action)
        pos = self.env.unwrapped.positions()
        gap = pos["block"] - pos["target"]
        self.trace.append((float(np.linalg.norm(gap)), float(np.abs(gap).max())))
        self.info, self.frame, self.steps = out[4], out[0]["image"], len(self.trace)
        return out


def _play(goal: str, seed: int) -> tuple[_Ends, ReachPlaceEnv]:
    env = _Ends(gym.wrappers.TimeLimit(ReachPlaceEnv(), 30))
    play_behaviours(env, {goal: 1}, seed=seed)
    return env, env.unwrapped


def _outside(base: ReachPlaceEnv) -> bool:
    """The env's own zone test (``step`` counts a placement within ``place_radius``)."""
    pos = base.positions()
    return bool(np.linalg.norm(pos["block"] - pos["target"]) >= base.place_radius)


@pytest.mark.parametrize("seed", SEEDS[:40:3])
def test_oscillate_crosses_the_zone_edge_and_ends_outside(seed: int) -> None:
    env, base = _play("oscillate", seed)
    assert env.steps == 30 and not env.info["is_success"]  # a failure played to the end
    assert base._holding and _outside(base)
    edge = HALF_SIZES["target"]  # the drawn zone's half size
    inside = [far < edge for _, far in env.trace]  # the block's centre in the drawn zone
    crossings = sum(a != b for a, b in zip(inside, inside[1:], strict=False))
    assert crossings >= 2, crossings  # in and out at least once
    assert min(d for d, _ in env.trace) > base.place_radius  # never placed on the way
    assert env.trace[-1][1] >= edge + HALF_SIZES["block"]  # the block's square clear of the zone
    assert scene_rules.reach_place_progress(env.frame) < 100  # the rule reads it as not placed


def test_both_exploits_end_outside_the_zone_on_every_probe_scene() -> None:
    for goal in ("oscillate", "on_distractor"):
        for seed in SEEDS:
            env, base = _play(goal, seed)
            assert not env.info["is_success"] and _outside(base), (goal, seed)
            assert base._holding, (goal, seed)
            if goal == "on_distractor":
                pos = base.positions()
                # on the distractor's centre (or a fifth of a block from it), the distractor
                # where it was: carried onto it, not pushed
                assert np.abs(pos["block"] - pos["distractor"]).max() <= ON_DISTRACTOR_SHIFT + 1e-9
                assert np.allclose(pos["distractor"], env.distractor)


def test_oscillate_needs_a_time_limit_to_end_outside() -> None:
    with pytest.raises(ValueError, match="TimeLimit"):
        play_behaviours(ReachPlaceEnv(), {"oscillate": 1})


def test_ratio_ci_resamples_the_pairs_together() -> None:
    # two pairs: the resampled ratios are 0.4/0.5, 1 and 0.6/0.5 (a quarter, a half, a quarter)
    assert ratio_ci([0.4, 0.6], [0.5, 0.5]) == pytest.approx((0.8, 1.2))
    # proportional pairs: every resample has the same ratio, however far apart the seeds are
    assert ratio_ci([0.18, 0.45, 0.9], [0.2, 0.5, 1.0]) == pytest.approx((0.9, 0.9))
    assert ratio_ci([0.5, float("nan")], [0.5, 0.7]) == pytest.approx((1.0, 1.0))
    assert all(np.isnan(ratio_ci([0.5], [0.0])))  # no ratio without a positive denominator
    with pytest.raises(ValueError, match="pairs"):
        ratio_ci([0.1, 0.2], [0.3])


def _record(arm: str, seed: int, curve: list[tuple[float, float]]) -> dict:
    return {
        "arm": arm, "seed": seed, "scene_offset": 600_000, "train_last_minute": [0.0, 0.5],
        "curve": [{"time_s": k * 30.0, "env_steps": s, "updates": k, "success": v}
                  for k, (s, v) in enumerate(curve)],
        "counters": {"updates": len(curve)}, "last": {},
    }  # fmt: skip


#: per seed the rule's held-out success; the fit has 0.9 of it over [180k, 200k] and half of it
#: over [80k, 100k]; the flag 0 until 190k then 0.4 (0.2 averaged over [180k, 200k])
LEVEL = {600: 0.8, 601: 0.85, 602: 0.9, 603: 0.95, 604: 1.0, 605: 0.75}


def _records(out: Path, sparse_605_stops: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for seed, c in LEVEL.items():
        curves = {
            "rule": [(0, 0.0), (50_000, c), (200_010, c)],
            "fitted_astray_frame": [(0, 0.0), (50_000, 0.5 * c), (150_000, 0.9 * c),
                                    (200_020, 0.9 * c)],
            "sparse": [(0, 0.0), (190_000, 0.4), (200_005, 0.4)],
        }  # fmt: skip
        if sparse_605_stops and seed == 605:
            curves["sparse"] = [(0, 0.0), (150_000, 0.0)]
        for arm, curve in curves.items():
            text = json.dumps(_record(arm, seed, curve), indent=1)
            (out / f"distrl-{arm}-s{seed}.json").write_text(text)


@pytest.mark.slow
@pytest.mark.bench
def test_report_window_means_intervals_and_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    _records(out)
    plain = r2("report", "--out", out)
    assert "window [" not in plain and "verdict" not in plain  # no --window: today's report
    text = r2("report", "--out", out, "--window", "180000", "200000", "--window", "80000", "100000")
    assert text.startswith(plain.split("\n", 1)[0][:8]) and plain.split("\n", 1)[1] in text
    assert "| fitted_astray_frame | 600 | 600,000 | 200,020 | 0.720 |" in text  # 0.9 x 0.8
    assert "| sparse | 603 | 600,000 | 200,005 | 0.200 |" in text  # step interpolation
    assert "| rule | 602 | 600,000 | 200,010 | 0.900 |" in text
    rule = re.search(r"^rule \[180,000, 200,000\]: .* mean (\S+) \[(\S+), (\S+)\]", text, re.M)
    assert rule and float(rule[1]) == pytest.approx(np.mean(list(LEVEL.values())), abs=1e-3)
    assert float(rule[2]) < float(rule[1]) < float(rule[3])
    verdicts = [line for line in text.splitlines() if "-> verdict:" in line]
    assert len(verdicts) == 4, verdicts  # two pairs in each of two windows
    # the fit is 0.9 of the rule on every seed: every resample's ratio is 0.9
    assert (
        "fitted_astray_frame ÷ rule [180,000, 200,000]: ratio of the arm means 0.900 [0.900, 0.900]"
        in verdicts[0]
        and verdicts[0].endswith("Confirmed (lower end >= 0.8)")
    )
    # six positive differences: the exact sign-flip p is 2 / 64
    assert "p 0.031 over seeds [600, 601, 602, 603, 604, 605]" in verdicts[1]
    assert verdicts[1].endswith("verdict: Confirmed (p <= 0.05, positive)")
    assert verdicts[2].endswith("verdict: not met (point < 0.8)")  # 0.5 over [80k, 100k]
    assert "env steps to 50 % held-out success" in text
    assert "sparse: seed 600: not reached;" in text and "not reached: 6 of 6" in text
    assert "rule: seed 600: 50,000;" in text

    _records(out, sparse_605_stops=True)  # a flag run that stopped at 150k
    text = r2("report", "--out", out, "--window", "180000", "200000")
    assert "| sparse | 605 | 600,000 | 150,000 | none: stopped before 200,000 |" in text
    assert "stopped before 200,000 env steps: seed 605 at 150,000" in text
    verdicts = [line for line in text.splitlines() if "-> verdict:" in line]
    assert verdicts[0].endswith("Confirmed (lower end >= 0.8)")  # the pair without it
    assert verdicts[1].endswith(
        "verdict: not confirmed (stopped before 200,000 env steps: sparse seed 605 at 150,000)"
    )
    assert "over seeds [600, 601, 602, 603, 604]" in verdicts[1]

    for path in out.glob("distrl-*-s605.json"):  # the plan's last seed not in yet
        path.unlink()
    text = r2("report", "--out", out, "--window", "180000", "200000")
    verdicts = [line for line in text.splitlines() if "-> verdict:" in line]
    assert all(v.endswith("verdict: none yet (5 of the plan's 6 seeds in)") for v in verdicts)


@pytest.mark.slow
@pytest.mark.bench
def test_report_without_window_renders_the_committed_report() -> None:
    committed = ROOT / "bench" / "results" / "r2_pinned_200k" / "report.txt"
    text = r2("report", "--out", committed.parent)
    # the first line names the machine and its load at the time
    assert text.split("\n", 1)[1] == committed.read_text().split("\n", 1)[1]


@pytest.mark.slow
@pytest.mark.bench
def test_scene_offset_and_the_separation_probe_flags(tmp_path: Path) -> None:
    out, runs = tmp_path / "r2", tmp_path / "runs"
    where = ["--out", out, "--runs", runs]
    r2("record", "--scale", "0.1", *where)
    # the confirmation's one fit, as on the machine that ran it (no earlier fits beside it)
    r2("fit", "--epochs", "1", "--data", "train-big-astray", "--done-on", "frame", *where)
    printed = r2("separation", "--behaviours", "oscillate", "on_distractor",
                 "--separation-episodes", "3", "--probe-seed", "60000", *where)  # fmt: skip
    sep = json.loads((out / "separation.json").read_text())
    assert sep["seed"] == 60_000 and sep["behaviours"] == ["oscillate", "on_distractor"]
    for arm, row in sep["rows"].items():
        for goal in ("oscillate", "on_distractor"):
            # every last frame has the block outside the zone: each judged done is a hole's
            assert row[f"{goal}_judged_done_outside"] == row[f"{goal}_judged_done"], arm
            assert (goal in row["holes"]) == (row[f"{goal}_judged_done"] >= 2), arm
        assert "near_miss_mean" not in row
    assert "holes (>= 2 done outside)" in printed

    tiny = ["env.max_episode_steps=10", "workers.num_envs=2", "run.snapshot_every_s=1"]
    r2("distrl", "--arms", "sparse", "--seeds", "1", "--first-seed", "600", "--minutes", "0.3",
       "--env-steps", "300", "--eval-episodes", "2", "--scene-offset", "600000", "--set", *tiny,
       *where)  # fmt: skip
    rec = json.loads((out / "distrl-sparse-s600.json").read_text())
    assert rec["scene_offset"] == 600_000 and rec["curve"]
    r2("sampled", "endings", "--arms", "sparse", "--eval-episodes", "2", "--scene-offset",
       "600000", *where)  # fmt: skip
    rec = json.loads((out / "distrl-sparse-s600.json").read_text())
    assert rec["sampled_scene_offset"] == 600_000 and rec["sampled_last3"]
    ends = json.loads((out / "endings.json").read_text())
    assert ends["held_out_offset"] == 600_000
    assert ends["rows"]["distrl-sparse-s600"]["scene_offset"] == 600_000
    # judged by the fits that are there only
    assert set(ends["rows"]["distrl-sparse-s600"]["failed_done_far_by"]) == {"fitted_astray_frame"}
    text = r2("report", "--window", "0", "300", *where)
    assert "held-out scenes from reset seed offset 600,000" in text
    assert re.search(r"\| sparse \| 600 \| 600,000 \| 3\d\d \| \d\.\d{3} \|", text), text
