"""The reward-hacking alarm (evolve_envs/progress/hacking.py, its wrapper): the detector on scripted
episode outcomes, and the wrapper end to end through make_env and a real reward server (mock
backend, intensity rule: the painted grey level is the progress the model reads)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from evolve_envs import ConfigError, load_config, make_env
from evolve_envs.progress.hacking import (
    HackingDetector,
    HackingDetectorConfig,
    RewardHackingWarning,
)
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.synthetic_env import SyntheticProgressEnv

W = 10  # window and baseline of these tests


def feed(d: HackingDetector, task: str, outcomes: list[tuple[float, bool]]) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardHackingWarning)
        return [d.add(task, score, ok) for score, ok in outcomes]


def test_quiet_until_both_windows_are_full() -> None:
    d = HackingDetector(window=W, baseline=W)
    states = feed(d, "t", [(0.1, False)] * W + [(1.0, False)] * (W - 1))
    assert not any(s["ready"] or s["firing"] for s in states)
    assert states[-1]["progress_rise"] is None and states[-1]["episodes"] == 2 * W - 1


def test_progress_without_success_fires_once_with_the_numbers_and_rearms() -> None:
    d = HackingDetector(window=W, baseline=W)
    feed(d, "t", [(0.3, i % 5 == 0) for i in range(W)])  # baseline: progress 0.3, success 0.2
    with pytest.warns(RewardHackingWarning) as caught:
        states = [d.add("t", 0.7, i % 5 == 0) for i in range(W)]  # same success, progress 0.7
    assert len(caught) == 1  # once per firing, not once per episode
    text = str(caught[0].message)
    assert "'t'" in text and "0.30 -> 0.70" in text and "0.20 -> 0.20" in text
    last = states[-1]
    assert last["firing"] and last["progress_without_success"]
    assert not last["high_progress_failures"]
    assert last["progress_rise"] == pytest.approx(0.4) and last["success_rise"] == 0.0
    assert last["triggers"] == 1
    # The scores settle: the baseline catches up, the signal clears, the alarm re-arms.
    quiet = feed(d, "t", [(0.7, i % 5 == 0) for i in range(2 * W)])
    assert not quiet[-1]["firing"] and quiet[-1]["triggers"] == 1
    with pytest.warns(RewardHackingWarning):
        again = [d.add("t", 1.0, False) for _ in range(W)]
    assert again[-1]["triggers"] == 2


def test_progress_rising_with_success_is_quiet() -> None:
    d = HackingDetector(window=W, baseline=W)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RewardHackingWarning)  # any alarm fails the test
        for i in range(W):
            d.add("t", 0.3, i < 2)
        for i in range(W):  # progress +0.4, success 0.2 -> 0.6
            d.add("t", 0.7 if i >= 6 else 0.95, i < 6)
    assert d.state("t")["progress_rise"] > 0.15 and not d.state("t")["firing"]


def test_high_progress_failures_rising() -> None:
    d = HackingDetector(window=W, baseline=W)
    # baseline: half real successes at 0.95, half failures at 0.5 (mean 0.725, no hp failures)
    feed(d, "t", [(0.95, True)] * 5 + [(0.5, False)] * 5)
    # recent: 3 failures scored 0.95, 2 successes, 5 low failures: mean progress falls to 0.62
    with pytest.warns(RewardHackingWarning, match=r"failures scored >= 0.9 rose 0.00 -> 0.30"):
        states = [d.add("t", s, ok) for s, ok in [(0.95, False)] * 3 + [(0.95, True)] * 2
                  + [(0.3, False)] * 5]  # fmt: skip
    last = states[-1]
    assert last["high_progress_failures"] and not last["progress_without_success"]
    assert last["high_failure_rise"] == pytest.approx(0.3) and last["progress_rise"] < 0


def test_tasks_are_watched_separately() -> None:
    d = HackingDetector(window=W, baseline=W)
    feed(d, "a", [(0.2, False)] * W + [(0.9, False)] * W)
    states = feed(d, "b", [(0.2, False)] * W + [(0.2, False)] * W)
    assert d.state("a")["firing"] and not states[-1]["firing"]
    assert sorted(d.tasks) == ["a", "b"] and d.state("never")["episodes"] == 0


def test_score_max_reads_max_progress() -> None:
    from evolve_envs.progress.episode_summary import model_score

    summary = {"progress": 40.0, "max_progress": 90.0}
    assert model_score(summary) == pytest.approx(0.4)
    assert model_score(summary, "max") == pytest.approx(0.9)
    assert model_score({"progress": 25.0}) == 0.25 and model_score({}) is None


@pytest.mark.parametrize(
    "bad", [{"window": 1}, {"score": "mean"}, {"min_progress_rise": 0.0}, {"baseline": 2.5}]
)
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="alarm"):
        HackingDetectorConfig(**bad)
    with pytest.raises(ConfigError, match=r"^reward_model\.alarm\."):
        load_config({"reward_model": {"alarm": bad}}, environ={})


# ---------------------------------------------------------------------------- through make_env
# (intensity_service: tests/e2e/conftest.py)


def test_make_env_installs_the_alarm_from_yaml_keys(intensity_service: EmbeddedService) -> None:
    """Painted episodes whose progress climbs from 20 to 90 while the env never succeeds."""
    steps, n = 6, 4
    scripts = [[0.0] + [20.0] * steps] * n + [[0.0] + [90.0] * steps] * n
    cfg = {
        "env": {"scripts": scripts, "max_episode_steps": steps},
        "reward_model": {
            "enable": True, "endpoint": intensity_service.url, "mode": "trajectory",
            "start_step": 2, "call_every": 2,
            "alarm": {"enable": True, "window": n, "baseline": n},
        },
    }  # fmt: skip
    env = make_env(cfg, env_factory=SyntheticProgressEnv)
    try:
        assert env.get_wrapper_attr("reward_step").alarm is not None  # the reward step's alarm
        alarms = []
        with pytest.warns(RewardHackingWarning, match=r"0\.20 -> 0\.90"):
            for _ in range(2 * n):
                env.reset()
                for _t in range(steps):
                    _, _, term, trunc, info = env.step(env.action_space.sample())
                    assert ("reward_alarm" in info) == (term or trunc)
                    if term or trunc:
                        alarms.append(info["reward_alarm"])
                        break
        assert [a["firing"] for a in alarms] == [False] * (2 * n - 1) + [True]
        assert alarms[-1]["task"] == "paint the frame" and alarms[-1]["triggers"] == 1
        assert alarms[-1]["progress_recent"] == pytest.approx(0.9, abs=0.011)
    finally:
        env.close()
    off = make_env({**cfg, "reward_model": {**cfg["reward_model"], "alarm": {"enable": False}}},
                   env_factory=SyntheticProgressEnv)  # fmt: skip
    try:
        assert off.get_wrapper_attr("reward_step").alarm is None
    finally:
        off.close()


@pytest.mark.slow
def test_rollout_reports_the_alarm(tmp_path: Path) -> None:
    import csv
    import json

    from evolve_envs.cli.rollout import RolloutOptions, run_rollout

    overrides = {
        "env": {"max_episode_steps": 8},
        "reward_model": {"alarm": {"enable": True, "window": 2, "baseline": 2}},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardHackingWarning)  # random policy: either way
        run_rollout(
            RolloutOptions(config=["reach_place", overrides], episodes=5, out=tmp_path,
                           video=False, tensorboard=False, progress_bar=False)
        )  # fmt: skip
    rows = json.loads((tmp_path / "summary.json").read_text())["episodes"]
    alarms = [r["reward_alarm"] for r in rows]
    assert [a["episodes"] for a in alarms] == [1, 2, 3, 4, 5]
    assert [a["ready"] for a in alarms] == [False, False, False, True, True]
    assert all(isinstance(a["firing"], bool) for a in alarms)
    metrics = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [m["alarm_firing"] for m in metrics] == [str(int(a["firing"])) for a in alarms]
