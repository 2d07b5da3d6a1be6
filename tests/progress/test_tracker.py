"""ProgressTracker and progress_math driven by an in-process scripted critic (fast, no HTTP).

Properties: the dense reward sum equals the final progress/100 for arbitrary critic sequences,
failures, schedules, modes and sync/async timing; the pairwise check at t compares the PREVIOUS
milestone frame with o_t; sparse and binary pay the final value once.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evolve_envs.progress import arithmetic as pm
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.clients.results import CallResult


class LazyFuture(Future):
    """Becomes done after ``polls`` calls of done(), or at once when result() is asked."""

    def __init__(self, result: CallResult, polls: int) -> None:
        super().__init__()
        self._pending_result = result
        self._polls = polls

    def _resolve(self) -> None:
        if not super().done():
            self.set_result(self._pending_result)

    def done(self) -> bool:
        if not super().done():
            if self._polls <= 0:
                self._resolve()
            self._polls -= 1
        return super().done()

    def result(self, timeout=None):
        self._resolve()
        return super().result(timeout)


@dataclass
class TV:
    value_list: list[float]


class ScriptedCritic:
    """A fake progress client: answers come from scripted lists; frames carry their step."""

    def __init__(self, answers: list[tuple[float, bool]], polls: list[int]) -> None:
        self.answers = answers
        self.polls = polls
        self.i = 0
        self.pairs: list[tuple[int, int]] = []

    def _next(self, value_of) -> Future:
        value, ok = self.answers[self.i % len(self.answers)]
        polls = self.polls[self.i % len(self.polls)]
        self.i += 1
        result = CallResult(value_of(value) if ok else None, ok, not ok, 0.001, "fake", None)
        return LazyFuture(result, polls)

    def submit_pairwise_critic(self, task, image_a, image_b) -> Future:
        self.pairs.append((int(image_a[0, 0, 0]), int(image_b[0, 0, 0])))
        return self._next(lambda v: v)

    def submit_trajectory_values(self, task, frames, *, skip=1) -> Future:
        return self._next(lambda v: TV([0.0, (v + 100.0) / 2.0]))


def frame(step: int) -> np.ndarray:
    return np.full((2, 2, 3), step % 256, np.uint8)


def run(critic: ScriptedCritic, s: TrackerConfig, length: int, end_by: str = "truncation"):
    tracker = ProgressTracker(critic, s)
    tracker.reset("task", frame(0))
    rewards, out = [], None
    for t in range(1, length + 1):
        out = tracker.observe(t, frame(t), env_truncated=(t == length and end_by == "truncation"))
        rewards.append(out.reward)
        if out.episode_over:
            break
    if not out.episode_over:
        rewards[-1] += tracker.finish()
    return rewards, tracker


failing_answers_st = st.lists(
    st.tuples(st.floats(-100, 100, allow_nan=False), st.booleans()), min_size=1, max_size=40
)
settings_st = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["pairwise", "incremental", "trajectory"]),
        "negative_rule": st.sampled_from(["vlac", "robodopamine"]),
        "start_step": st.integers(0, 20),
        "call_every": st.integers(1, 8),
        "milestone_every": st.integers(0, 30),
        "calls": st.sampled_from(["sync", "async"]),
        "max_lag_steps": st.integers(0, 6),
        "terminate_on_done": st.booleans(),
        "done_threshold": st.floats(0.5, 1.0),
        "check_at_episode_end": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    answers=failing_answers_st,
    polls=st.lists(st.integers(0, 5), min_size=1, max_size=10),
    cfg=settings_st,
    length=st.integers(1, 120),
    end_by=st.sampled_from(["truncation", "finish"]),
)
def test_dense_sum_equals_final_progress(answers, polls, cfg, length, end_by) -> None:
    critic = ScriptedCritic(answers, polls)
    rewards, tracker = run(critic, TrackerConfig(**cfg), length, end_by)
    final = tracker.summary["progress"]
    assert 0.0 <= final <= 100.0
    assert sum(rewards) == pytest.approx(final / 100.0, abs=1e-9)
    assert tracker.summary["model_reward"] == pytest.approx(final / 100.0, abs=1e-9)
    assert tracker.pending == 0


@settings(max_examples=100, deadline=None)
@given(
    answers=failing_answers_st,
    polls=st.lists(st.integers(0, 5), min_size=1, max_size=10),
    cfg=settings_st,
    length=st.integers(1, 120),
    mode=st.sampled_from(["sparse", "binary"]),
    rel=st.booleans(),
    coef=st.floats(0.1, 5.0),
)
def test_sparse_and_binary_pay_the_final_value(answers, polls, cfg, length, mode, rel, coef):
    s = TrackerConfig(**cfg, reward_mode=mode, use_rel_reward=rel, reward_coef=coef)
    rewards, tracker = run(ScriptedCritic(answers, polls), s, length)
    final = tracker.summary["progress"]
    # binary: the documented comparison on the fraction rounded to 9 decimals
    expected = coef * (final / 100.0 if mode == "sparse" else float(round(final / 100, 9) >= 0.5))
    assert sum(rewards) == pytest.approx(expected, abs=1e-9)
    if not rel:
        assert all(r == 0.0 for r in rewards[:-1])


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(0, 20),
    every=st.integers(1, 8),
    milestone_every=st.integers(0, 40),
    length=st.integers(1, 200),
    mode=st.sampled_from(["pairwise", "incremental"]),
)
def test_reference_frame_is_the_previous_milestone(start, every, milestone_every, length, mode):
    critic = ScriptedCritic([(10.0, True)], [0])
    s = TrackerConfig(
        mode=mode,
        start_step=start,
        call_every=every,
        milestone_every=milestone_every,
        terminate_on_done=False,
    )
    run(critic, s, length)
    expected, milestone, prev = [], 0, 0
    for t in pm.check_steps(length, start_step=start, call_every=every):
        expected.append((milestone if mode == "pairwise" else prev, t))
        if milestone_every > 0 and t - milestone >= milestone_every:
            milestone = t
        prev = t
    assert critic.pairs == [(a % 256, b % 256) for a, b in expected]
    assert all(a != b for a, b in critic.pairs)  # never the frame with itself


def test_paper_schedule_checks_and_milestones() -> None:
    checks = list(pm.check_steps(200, start_step=64, call_every=16))
    assert checks == [64, 80, 96, 112, 128, 144, 160, 176, 192]
    milestones, last = [], 0
    for t in checks:
        if pm.is_milestone(t, last, 64):
            milestones.append(t)
            last = t
    assert milestones == [64, 128, 192]
    critic = ScriptedCritic([(10.0, True)], [0])
    run(critic, TrackerConfig(terminate_on_done=False), 200)
    assert critic.pairs[:6] == [(0, 64), (64, 80), (64, 96), (64, 112), (64, 128), (128, 144)]


def test_async_answer_applied_when_back_or_at_max_lag() -> None:
    # The first answer is back after 1 poll; the second never comes back by itself.
    critic = ScriptedCritic([(50.0, True), (50.0, True)], [1, 10**6])
    s = TrackerConfig(
        mode="incremental", start_step=2, call_every=2, calls="async", max_lag_steps=3
    )
    tracker = ProgressTracker(critic, s)
    tracker.reset("task", frame(0))
    outs = [tracker.observe(t, frame(t)) for t in range(1, 8)]
    checked = [t for t, o in enumerate(outs, start=1) if o.checked]
    # check 2: back on the poll at step 3; check 4: waited for at step 4 + 3 = 7
    assert checked[:2] == [3, 7]
    assert outs[2].reward == pytest.approx(0.5) and outs[6].progress == pytest.approx(75.0)


def test_failed_answer_holds_progress_and_counts() -> None:
    critic = ScriptedCritic([(40.0, True), (0.0, False), (50.0, True)], [0])
    s = TrackerConfig(start_step=2, call_every=2, milestone_every=2)
    tracker = ProgressTracker(critic, s)
    tracker.reset("task", frame(0))
    outs = [tracker.observe(t, frame(t), env_truncated=t == 6) for t in range(1, 7)]
    assert [o.progress for o in outs] == [0, 40, 40, 40, 40, 70]
    assert outs[3].info["reward_model_fallback"] and outs[3].info["reward_model_errors"] == 1
    assert outs[-1].summary["reward_model_fallbacks"] == 1


@pytest.mark.parametrize(
    ("value", "critic", "rule", "expected"),
    [
        (0, 40, "vlac", 40),
        (40, 50, "vlac", 70),
        (40, -100, "vlac", 0),  # 2·40 − 100 < 0: clamped
        (70, -50, "vlac", 55),
        (70, -50, "robodopamine", 35),
        (70, 50, "robodopamine", 85),
        (100, 30, "vlac", 100),
    ],
)
def test_accumulate(value, critic, rule, expected) -> None:
    assert pm.accumulate(value, critic, rule) == pytest.approx(expected)


@given(a=st.floats(0, 99.9), b=st.floats(0, 100))
def test_critic_between_inverts_accumulate(a, b) -> None:
    assume(b >= 2 * a - 100)  # below that the critic would be < -100 and is clamped
    assert pm.accumulate(a, pm.critic_between(a, b)) == pytest.approx(b, abs=1e-9)


def test_reached_is_explicit() -> None:
    assert pm.reached(0.95, 0.95, ">=") and not pm.reached(0.95, 0.95, ">")
    with pytest.raises(ValueError, match="comparison"):
        pm.reached(0.9, 0.95, "=>")  # type: ignore[arg-type]


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="call_every"):
        TrackerConfig(call_every=0)
    with pytest.raises(ValueError, match="done_threshold"):
        TrackerConfig(done_threshold=95)
    with pytest.raises(ValueError, match="mode"):
        TrackerConfig(mode="milestone")  # type: ignore[arg-type]
