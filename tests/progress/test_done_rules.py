"""Done rules (evolve_envs/progress/done_rules.py) and the audit of model termination.

The rule logic is checked on scripted check sequences; the k-of-n rule is then compared with the
plain threshold on noisy painted episodes scored by a real reward server (mock backend, intensity
rule: the painted grey level is read back as progress over JPEG and HTTP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from evolve_envs import ConfigError, load_config
from evolve_envs.progress.done_rules import DoneRule, TerminationAudit
from evolve_envs.progress.tracker_config import TrackerConfig, check_capabilities
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.frame_cache import FrameCache
from evolve_envs.wrappers.model_handle import lend
from evolve_envs.wrappers.progress_reward import ProgressReward
from tests.helpers.synthetic_env import SyntheticProgressEnv

# ---------------------------------------------------------------------------- pure rule logic


def votes(rule: DoneRule, checks: list[tuple[bool | None, bool | None]]) -> list[bool]:
    judge = rule.judge()
    return [judge.update(above=a, backend=b) for a, b in checks]


def test_threshold_and_backend_read_one_check() -> None:
    checks = [(True, False), (False, True), (None, None), (True, True)]
    assert votes(DoneRule("threshold"), checks) == [True, False, False, True]
    assert votes(DoneRule("backend"), checks) == [False, True, False, True]


def test_k_of_n_counts_the_last_n_answered_checks() -> None:
    rule = DoneRule("k_of_n", k=2, n=3)
    seq = [True, False, False, True, None, False, True, True]
    # window (answered only): [T] [T,F] [T,F,F] [F,F,T] (None skipped) [F,T,F] [T,F,T] [F,T,T]
    assert votes(rule, [(a, None) for a in seq]) == [
        False, False, False, False, False, False, True, True,
    ]  # fmt: skip
    consecutive = DoneRule("k_of_n", k=3, n=3)
    assert votes(consecutive, [(a, None) for a in [True, True, False, True, True, True]]) == [
        False, False, False, False, False, True,
    ]  # fmt: skip


def test_combinations_keep_every_sub_rule_state() -> None:
    # all(2 of 2, backend): the k-of-n window fills even while the backend says no.
    rule = DoneRule("all", rules=(DoneRule("k_of_n", k=2, n=2), DoneRule("backend")))
    assert votes(rule, [(True, False), (True, False), (True, True)]) == [False, False, True]
    rule = DoneRule("any", rules=(DoneRule("k_of_n", k=2, n=2), DoneRule("backend")))
    assert votes(rule, [(True, False), (False, True), (True, False), (True, False)]) == [
        False, True, False, True,
    ]  # fmt: skip
    judge = rule.judge()
    judge.update(above=True)
    judge.reset()  # a new episode forgets the window
    assert judge.update(above=True) is False


def test_done_by_names_map_to_rules() -> None:
    assert DoneRule.from_done_by("threshold") == DoneRule("threshold")
    assert DoneRule.from_done_by("backend") == DoneRule("backend")
    both = DoneRule.from_done_by("both")
    assert both.kind == "all" and both.needs_backend
    assert votes(DoneRule.from_done_by("either"), [(True, False), (False, True), (False, False)]) \
        == [True, True, False]  # fmt: skip
    assert votes(both, [(True, False), (True, True)]) == [False, True]
    assert not DoneRule("k_of_n", k=1, n=2).needs_backend


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "k_of_n", "k": 3, "n": 2},
        {"kind": "k_of_n", "k": 0, "n": 2},
        {"kind": "any"},
        {"kind": "threshold", "rules": ["backend"]},
        {"kind": "k_of_n", "k": 1, "n": 2, "votes": 3},
        "k_of_n",
        {"kind": "maybe"},
    ],
)
def test_bad_rules_are_refused(spec: Any) -> None:
    with pytest.raises(ValueError):
        DoneRule.parse(spec)


def test_audit_counts_per_task() -> None:
    audit = TerminationAudit()
    audit.record("a", model_done=True, success_at_done=True, env_success=True)
    audit.record("a", model_done=True, success_at_done=False, env_success=False)
    audit.record("a", model_done=False, success_at_done=None, env_success=True)
    audit.record("b", model_done=True, success_at_done=False, env_success=None)
    a = audit.counts("a")
    got = (a["episodes"], a["model_done"], a["model_done_success"], a["env_success"])
    assert got == (3, 2, 1, 2)
    assert a["precision"] == 0.5 and a["recall"] == 0.5
    b = audit.counts("b")
    assert b["unknown"] == 1 and b["precision"] is None
    assert audit.counts()["episodes"] == 4 and audit.counts("never")["precision"] is None


# ---------------------------------------------------------------------------- configuration


def test_config_done_by_takes_names_and_rules() -> None:
    rm = load_config(
        {"reward_model": {"done_by": {"kind": "any", "rules": [
            {"kind": "k_of_n", "k": 2, "n": 3}, {"kind": "backend"}]}}}, environ={}
    ).reward_model  # fmt: skip
    settings = rm.tracker_config()
    assert settings.rule.describe() == "any(2_of_3, backend)" and settings.needs_done
    assert load_config({"reward_model": {"done_by": "both"}}, environ={}).reward_model \
        .tracker_config().done_by == "both"  # fmt: skip
    with pytest.raises(ConfigError, match=r"^reward_model\.done_by\.rules\[0\]: k_of_n needs"):
        load_config({"reward_model": {"done_by": {"kind": "any", "rules": [
            {"kind": "k_of_n", "k": 4, "n": 3}]}}}, environ={})  # fmt: skip
    with pytest.raises(ConfigError, match=r"^reward_model\.done_by\.m: unknown key"):
        load_config({"reward_model": {"done_by": {"kind": "k_of_n", "m": 1}}}, environ={})
    with pytest.raises(ConfigError, match=r"^reward_model\.done_by: input should be"):
        load_config({"reward_model": {"done_by": "k_of_n"}}, environ={})


def test_rule_needing_done_is_refused_on_a_progress_only_backend() -> None:
    rule = {"kind": "all", "rules": [{"kind": "k_of_n", "k": 2, "n": 2}, {"kind": "backend"}]}
    caps = {"backend": "progress-only", "progress": True, "pairwise": True, "done": False}
    with pytest.raises(ConfigError, match=r"all\(2_of_2, backend\).*/done"):
        check_capabilities(TrackerConfig(done_by=rule), caps)
    check_capabilities(TrackerConfig(done_by={"kind": "k_of_n", "k": 2, "n": 2}), caps)


# ---------------------------------------------------------------------------- through the service
# (intensity_service: tests/e2e/conftest.py)

STEPS = 20
SCHEDULE = {"mode": "trajectory", "start_step": 2, "call_every": 2, "done_threshold": 0.95}


def failure(spikes: tuple[int, ...]) -> list[float]:
    """A failed episode scored around 55 with one-check spikes to 97 (a noisy reward model)."""
    return [0.0] + [97.0 if t in spikes else 55.0 + (t % 3) for t in range(1, STEPS + 1)]


def success() -> list[float]:
    """A real success: progress climbs to 80, then 97 from step 12 on, where the env succeeds."""
    return [0.0] + [min(80.0, 8.0 * t) if t < 12 else 97.0 for t in range(1, STEPS + 1)]


SCRIPTS = [failure((4,)), success(), failure((10,)), failure(()), success(), failure((6, 8)),
           failure((16,)), success()]  # fmt: skip
SUCCESS_AT = [12 if s == success() else None for s in SCRIPTS]


def run(url: str, done_by: Any) -> tuple[TerminationAudit, list[dict[str, Any]]]:
    env: gym.Env = SyntheticProgressEnv(SCRIPTS, success_at=SUCCESS_AT, terminate_on_success=False)
    env = gym.wrappers.TimeLimit(env, STEPS)
    env = FrameCache(env, "agentview_image")
    client = ProgressClient(url, max_workers=2)
    env = ProgressReward(env, lend(client), {**SCHEDULE, "done_by": done_by})
    tracker = env.tracker
    summaries = []
    try:
        for _ in SCRIPTS:
            env.reset()
            while True:
                _, _, term, trunc, info = env.step(env.action_space.sample())
                if term or trunc:
                    summaries.append(info["episode_reward_model"])
                    break
    finally:
        env.close()
        client.close()
    return tracker.audit, summaries


def test_k_of_n_cuts_false_terminations_of_a_noisy_model(
    intensity_service: EmbeddedService,
) -> None:
    plain, plain_eps = run(intensity_service.url, "threshold")
    voted, voted_eps = run(intensity_service.url, {"kind": "k_of_n", "k": 2, "n": 3})
    n_success = SUCCESS_AT.count(12)
    false_plain = sum(s["model_terminated"] and not s["done_env_success"] for s in plain_eps)
    false_voted = sum(s["model_terminated"] and not s["done_env_success"] for s in voted_eps)
    # Every failure with a spike at a check fools the threshold; only the one with two spikes
    # in three checks fools 2-of-3.
    assert false_plain == 4 and false_voted == 1
    p, v = plain.counts("paint the frame"), voted.counts("paint the frame")
    assert p["model_done"] == 4 + n_success and v["model_done"] == 1 + n_success
    assert p["precision"] == pytest.approx(n_success / (4 + n_success))
    assert v["precision"] == pytest.approx(n_success / (1 + n_success))
    assert p["recall"] == v["recall"] == 1.0  # the real successes are still ended
    # k-of-n waits for a second check: successes end one check later.
    assert [s["done_step"] for s in plain_eps if s["is_success"]] == [12] * n_success
    assert [s["done_step"] for s in voted_eps if s["is_success"]] == [14] * n_success
    assert voted_eps[-1]["done_rule"] == "2_of_3"


def test_episode_summary_reports_the_running_audit(intensity_service: EmbeddedService) -> None:
    _, eps = run(intensity_service.url, "threshold")
    running = [s["termination_audit"]["model_done"] for s in eps]
    assert running == [1, 2, 3, 3, 4, 5, 6, 7]  # the episode with no spike is not model-done
    first, second = eps[0], eps[1]
    assert first["model_terminated"] and first["done_env_success"] is False
    assert first["termination_audit"]["precision"] == 0.0
    assert second["model_terminated"] and second["done_env_success"] is True
    assert second["termination_audit"]["precision"] == 0.5
    assert eps[3]["model_terminated"] is False and eps[3]["done_env_success"] is None
    assert eps[-1]["task"] == "paint the frame"


def test_combined_rule_asks_the_backend(intensity_service: EmbeddedService) -> None:
    # all(2 of 3, backend): the backend's /done (progress >= 95) vetoes nothing here, but its
    # call doubles the requests per check.
    rule = {"kind": "all", "rules": [{"kind": "k_of_n", "k": 2, "n": 3}, {"kind": "backend"}]}
    audit, eps = run(intensity_service.url, rule)
    assert audit.counts()["model_done"] == 1 + SUCCESS_AT.count(12)
    assert eps[0]["progress_calls"] == 2 * (STEPS // 2)


# ---------------------------------------------------------------------------- rollout report


@pytest.mark.slow
def test_rollout_reports_the_audit(tmp_path: Path) -> None:
    """A done threshold of 0 makes the model call every episode done at its first check; the
    random policy never succeeds, so the run's precision of model termination is 0."""
    import csv
    import json

    from evolve_envs.cli.rollout import RolloutOptions, run_rollout

    overrides = {"env": {"max_episode_steps": 12}, "reward_model": {"done_threshold": 0.0}}
    run_rollout(
        RolloutOptions(config=["reach_place", overrides], episodes=2, out=tmp_path, video=False,
                       tensorboard=False, progress_bar=False)
    )  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = summary["episodes"]
    assert [r["model_terminated"] for r in rows] == [True, True]
    assert [r["done_env_success"] for r in rows] == [False, False]
    assert [r["termination_audit"]["model_done"] for r in rows] == [1, 2]  # running counts
    overall = summary["termination_audit"]["overall"]
    assert overall["model_done"] == 2 and overall["precision"] == 0.0
    (task,) = summary["termination_audit"]["per_task"]
    assert task == rows[0]["task_description"]
    metrics = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [float(m["termination_precision"]) for m in metrics] == [0.0, 0.0]
