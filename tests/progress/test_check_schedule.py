"""The async schedule that hides the answer latency: ``last_check="before_limit"`` and
``max_lag_steps="auto"``, driven by a simulated clock (no HTTP, no sleeping).

The fake client's answers come back ``latency`` simulated seconds after the request; the test
advances the clock by the env step time between ``observe`` calls, and a ``result()`` on an
answer that is not back yet advances the clock to its arrival (the tracker waited).
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve_envs.progress import arithmetic as pm
from evolve_envs.progress.answers import CheckAnswers
from evolve_envs.progress.check_schedule import AnswerTiming, episode_limit
from evolve_envs.progress.episode_state import EpisodeState, PendingCheck
from evolve_envs.progress.request_modes import REQUEST_MODES
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.clients.results import CallResult
from evolve_envs.wrappers.progressive_horizon import ProgressiveHorizon


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedFuture(Future):
    """Done once the clock reaches ``due``; ``result()`` before that waits (moves the clock)."""

    def __init__(self, clock: Clock, due: float, result: CallResult) -> None:
        super().__init__()
        self.clock, self.due, self._value = clock, due, result

    def _resolve(self) -> None:
        if not super().done():
            self.set_result(self._value)

    def done(self) -> bool:
        if not super().done() and self.clock.now >= self.due:
            self._resolve()
        return super().done()

    def result(self, timeout=None):
        if not super().done():
            self.clock.now = max(self.clock.now, self.due)
            self._resolve()
        return super().result(timeout)


@dataclass
class TV:
    value_list: list[float]


class TimedCritic:
    """A fake progress client: critic answers ``critics[i]`` after ``latencies[i]`` seconds."""

    def __init__(self, clock: Clock, latencies: list[float], critics: list[float]) -> None:
        self.clock = clock
        self.latencies = itertools.cycle(latencies)
        self.critics = itertools.cycle(critics)
        self.sent: list[int] = []

    def _next(self, value) -> Future:
        result = CallResult(value, True, False, 0.0, "fake", None)
        return TimedFuture(self.clock, self.clock.now + next(self.latencies), result)

    def submit_pairwise_critic(self, task, image_a, image_b) -> Future:
        self.sent.append(int(image_b[0, 0, 0]) + 256 * int(image_b[0, 0, 1]))
        return self._next(next(self.critics))

    def submit_trajectory_values(self, task, frames, *, skip=1) -> Future:
        last = frames[-1]
        self.sent.append(int(last[0, 0, 0]) + 256 * int(last[0, 0, 1]))
        return self._next(TV([0.0, (next(self.critics) + 100.0) / 2.0]))


def frame(step: int) -> np.ndarray:
    out = np.zeros((2, 2, 3), np.uint8)
    out[..., 0], out[..., 1] = step % 256, step // 256
    return out


def play(tracker, critic, clock, length, step_s, limit=None):
    """One episode of ``length`` steps ended by the time limit: (rewards, summary, sent, waited
    seconds at the last step)."""
    critic.sent = []
    tracker.reset("task", frame(0), time_limit=limit)
    rewards, out, last_wait = [], None, 0.0
    steps = step_s if isinstance(step_s, list) else [step_s]
    for t in range(1, length + 1):
        clock.now += steps[t % len(steps)]
        before = clock.now
        out = tracker.observe(t, frame(t), env_truncated=t == length)
        last_wait = clock.now - before
        rewards.append(out.reward)
    assert out.episode_over
    return rewards, out.summary, list(critic.sent), last_wait


P2 = {"start_step": 64, "call_every": 16, "milestone_every": 64, "calls": "async",
      "terminate_on_done": False}  # fmt: skip


def test_last_check_before_limit_leaves_nothing_outstanding_at_the_last_step() -> None:
    """P2's schedule (300 steps of 20 ms, 500 ms answers): on the grid the last check (288) is
    answered ~240 ms after the limit; before_limit keeps 64..272, whose last answer (at ~297)
    is back before the limit: no wait at the last step."""
    results = {}
    for last_check in ("grid", "before_limit"):
        clock = Clock()
        critic = TimedCritic(clock, [0.5], [10.0])
        s = TrackerConfig(**P2, max_lag_steps=32, last_check=last_check)
        tracker = ProgressTracker(critic, s, time_limit=300, clock=clock)
        runs = [play(tracker, critic, clock, 300, 0.02) for _ in range(3)]
        results[last_check] = runs
        for rewards, summary, _, _ in runs:
            assert sum(rewards) == pytest.approx(summary["progress"] / 100.0, abs=1e-9)
    grid = results["grid"][-1]
    assert grid[2] == list(range(64, 301, 16))
    assert grid[1]["end_waits"] == 1 and grid[3] == pytest.approx(0.5 - 12 * 0.02)
    before = results["before_limit"]
    # 25 steps, seen one step late: the fake answers when polled at the next step
    assert tracker.latency_steps() == pytest.approx(26.0)
    for _, summary, sent, last_wait in before:
        assert sent == list(range(64, 273, 16))
        assert summary["end_waits"] == 0 and summary["lag_waits"] == 0
        assert last_wait == 0.0


def test_last_check_moves_before_the_cutoff_when_the_grid_ends_late() -> None:
    """With 700 ms answers (seen as 36 steps: the fake answers when polled) the cutoff is
    300 - 37 = 263: 272 and 288 would be answered after the limit, so one check at 264
    replaces them (the previous one, 256, is half an interval back)."""
    clock = Clock()
    critic = TimedCritic(clock, [0.7], [20.0, -5.0])
    s = TrackerConfig(**P2, max_lag_steps="auto", last_check="before_limit")
    tracker = ProgressTracker(critic, s, time_limit=lambda: 300, clock=clock)
    for _ in range(3):
        rewards, summary, sent, last_wait = play(tracker, critic, clock, 300, 0.02)
        assert sum(rewards) == pytest.approx(summary["progress"] / 100.0, abs=1e-9)
    assert sent == [*range(64, 257, 16), 264]
    assert summary["end_waits"] == 0 and summary["lag_waits"] == 0 and last_wait == 0.0
    assert summary["progress_calls"] < len(list(pm.check_steps(300, start_step=64, call_every=16)))


def test_auto_lag_waits_only_for_late_answers() -> None:
    """650 ms answers at 20 ms steps are 32.5 steps: a fixed lag of 32 waits (10 ms) at every
    other check (a wait delays the next ones), ``auto`` (about ceil(1.25 · 33) + 2) never
    does; a single very late answer is still waited for, at the auto lag."""
    waits = {}
    for lag in (32, "auto"):
        clock = Clock()
        critic = TimedCritic(clock, [0.65], [10.0])
        tracker = ProgressTracker(critic, TrackerConfig(**P2, max_lag_steps=lag), clock=clock)
        runs = [play(tracker, critic, clock, 300, 0.02) for _ in range(2)]
        waits[lag] = runs[-1][1]["lag_waits"]
    assert waits[32] >= 5 and waits["auto"] == 0
    clock = Clock()
    latencies = [0.65] * 20 + [5.0] + [0.65] * 20
    critic = TimedCritic(clock, latencies, [10.0])
    tracker = ProgressTracker(critic, TrackerConfig(**P2, max_lag_steps="auto"), clock=clock)
    summaries = [play(tracker, critic, clock, 300, 0.02)[1] for _ in range(3)]
    assert sum(s["lag_waits"] for s in summaries) == 1


def test_without_a_measured_latency_or_a_limit_the_grid_is_used() -> None:
    clock = Clock()
    critic = TimedCritic(clock, [0.5], [10.0])
    s = TrackerConfig(**P2, max_lag_steps="auto", last_check="before_limit")
    tracker = ProgressTracker(critic, s, clock=clock)  # no time limit known
    _, summary, sent, _ = play(tracker, critic, clock, 300, 0.02)
    assert sent == list(range(64, 301, 16)) and summary["end_waits"] == 1
    assert play(tracker, critic, clock, 300, 0.02)[2] == list(range(64, 301, 16))
    # a limit but no answer measured yet (a fresh tracker): the first episode is on the grid
    # until its first answer is in
    fresh = ProgressTracker(critic, s, time_limit=300, clock=clock)
    assert fresh.latency_steps() is None
    # sync calls ignore both settings
    sync = ProgressTracker(critic, s.replace(calls="sync"), time_limit=300, clock=clock)
    assert play(sync, critic, clock, 300, 0.02)[2] == list(range(64, 301, 16))


@settings(max_examples=120, deadline=None)
@given(
    latencies=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=12),
    step_s=st.lists(st.floats(0.001, 0.1), min_size=1, max_size=6),
    critics=st.lists(st.floats(-100, 100), min_size=1, max_size=12),
    mode=st.sampled_from(["pairwise", "incremental", "trajectory"]),
    start=st.integers(0, 30),
    every=st.integers(1, 20),
    length=st.integers(1, 150),
    limit_offset=st.sampled_from([0, 0, 5, -3, None]),
    lag=st.sampled_from(["auto", 0, 3, 40]),
    reward_mode=st.sampled_from(["dense", "sparse"]),
    episodes=st.integers(1, 3),
)
def test_sums_stay_exact_with_random_latencies(
    latencies, step_s, critics, mode, start, every, length, limit_offset, lag, reward_mode,
    episodes,
) -> None:  # fmt: skip
    """Whatever the latencies, step times and limit (even a wrong one): the reward sum is the
    final progress and nothing stays pending; with a limit that is not too short, before_limit
    never sends more checks than the grid: a prefix of the grid and at most one moved check."""
    clock = Clock()
    critic = TimedCritic(clock, latencies, critics)
    s = TrackerConfig(
        mode=mode, start_step=start, call_every=every, milestone_every=2 * every, calls="async",
        max_lag_steps=lag, last_check="before_limit", reward_mode=reward_mode,
        terminate_on_done=False,
    )  # fmt: skip
    limit = None if limit_offset is None else max(1, length + limit_offset)
    tracker = ProgressTracker(critic, s, time_limit=limit, clock=clock)
    horizon = length if limit is None else max(limit, length)  # limit > length: ended early
    grid = list(pm.check_steps(horizon, start_step=start, call_every=every))
    for _ in range(episodes):
        rewards, summary, sent, _ = play(tracker, critic, clock, length, step_s)
        assert sum(rewards) == pytest.approx(summary["progress"] / 100.0, abs=1e-9)
        assert tracker.pending == 0
        assert sent == sorted(set(sent)) and all(1 <= t <= length for t in sent)
        if limit is not None and limit < length:
            continue  # a wrong limit: past it, the grid's checks again
        assert len(sent) <= len(grid)
        on_grid = [t for t in sent if t in grid]
        assert on_grid == grid[: len(on_grid)]  # a prefix of the grid ...
        assert len(sent) - len(on_grid) <= 1  # ... and at most one moved last check


def test_episode_limit_reads_time_limit_wrappers() -> None:
    env = gym.make("CartPole-v1").unwrapped
    assert episode_limit(gym.wrappers.TimeLimit(env, 7)) == 7
    horizon = ProgressiveHorizon(env, [{"max_steps": 3}, {"max_steps": 6, "after_episodes": 1}])
    horizon.reset(seed=0)
    assert episode_limit(horizon) == 3
    while not horizon.step(0)[3]:
        pass
    horizon.reset(seed=1)
    assert episode_limit(horizon) == 6
    assert episode_limit(env) is None


def test_make_env_tells_the_tracker_the_time_limit() -> None:
    from evolve_envs import make_env

    env = make_env("reach_place", max_episode_steps=6)
    try:
        assert env.tracker.time_limit() == 6
        env.reset(seed=0)
        assert env.tracker._ep.limit == 6
    finally:
        env.close()


def test_an_applied_answer_becomes_the_check_frames_value() -> None:
    s = TrackerConfig(mode="incremental")
    answers = CheckAnswers(
        s, REQUEST_MODES[s.mode](s), s.rule.judge(), AnswerTiming(clock=lambda: 0.0)
    )
    critic: Future[CallResult[object]] = Future()
    critic.set_result(CallResult(40.0, ok=True, fallback=False, latency_s=0.1, endpoint=None))
    ep = EpisodeState(task="open the drawer", step=4)
    ep.pending.append(PendingCheck(step=4, base_step=0, milestone=True, critic=critic))
    assert answers.apply_due(ep, 4) == (0.4, 1, False)  # (model reward, answers applied, fallback)
    assert ep.progress == 40.0 and ep.values == {0: 0.0, 4: 40.0}
