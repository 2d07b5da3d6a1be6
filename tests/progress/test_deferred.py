"""``calls: deferred`` is bounded: unsettled episodes per tracker, a deadline per answer (fallback
counted and logged, or raised with a fail-fast client), frame memory reported; a dead service still
fails at start-up. Real servers (mock backend, intensity rule) on loopback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np
import pytest

from evolve_envs import make_env
from evolve_envs.progress.check_schedule import AnswerTiming
from evolve_envs.progress.deferred import DeferredSettlement
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.episode_state import EpisodeState, PendingCheck
from evolve_envs.progress.request_modes import REQUEST_MODES
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.results import CallResult
from evolve_envs.reward.clients.service_check import ServiceUnavailableError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.synthetic_env import SyntheticProgressEnv, paint

SCHEDULE = {"start_step": 2, "call_every": 2, "milestone_every": 2, "calls": "deferred"}


@pytest.fixture(scope="module")
def slow() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", {"rule": "intensity", "latency_ms": 300}) as svc:
        yield svc


def episode(tracker: ProgressTracker, steps: int = 4, *, first: float = 0.0) -> list[bool]:
    """One episode of frames painted 10, 20, ...; ends by truncation at ``steps``."""
    tracker.reset("paint the frame", paint(first))
    ends = []
    for t in range(1, steps + 1):
        out = tracker.observe(t, paint(min(90.0, 10.0 * t)), env_truncated=t == steps)
        ends.append(out.episode_over)
        assert out.reward == 0.0  # the model part is paid at settlement
    return ends


def test_reset_waits_only_at_the_bound_and_counts_it(slow: EmbeddedService) -> None:
    with ProgressClient(slow.url) as client:
        tracker = ProgressTracker(client, {**SCHEDULE, "max_unsettled_episodes": 2})
        for _ in range(4):
            episode(tracker)
        stats = tracker.deferred_stats()
        assert stats["peak_unsettled_episodes"] == 2  # never more than the bound
        assert stats["saturation_waits"] >= 1 and stats["saturation_wait_s"] > 0.05
        assert stats["peak_unsettled_frame_bytes"] >= 2 * paint(0).nbytes
        settled = tracker.settled(wait=True)
        assert [ep.index for ep in settled] == [1, 2, 3, 4]
        assert all(ep.final and ep.truncated and ep.length == 4 for ep in settled)
        np.testing.assert_allclose([ep.rewards.sum() for ep in settled], 0.4)
        assert tracker.deferred_stats()["unsettled_frame_bytes"] == 0


def test_no_wait_below_the_bound(slow: EmbeddedService) -> None:
    with ProgressClient(slow.url) as client:
        tracker = ProgressTracker(client, {**SCHEDULE, "max_unsettled_episodes": 8})
        for _ in range(3):
            episode(tracker)
        stats = tracker.deferred_stats()
        assert stats["saturation_waits"] == 0
        assert stats["unsettled_episodes"] == stats["peak_unsettled_episodes"] == 3
        assert len(tracker.settled(wait=True)) == 3


def test_a_late_answer_falls_back_loudly(slow: EmbeddedService, caplog) -> None:
    with ProgressClient(slow.url) as client:
        tracker = ProgressTracker(client, {**SCHEDULE, "answer_timeout_s": 0.05})
        with caplog.at_level(logging.WARNING, logger="evolve_envs.progress.deferred"):
            episode(tracker)
            [ep] = tracker.settled(wait=True)
        assert ep.summary["reward_model_errors"] == 2 == ep.summary["reward_model_fallbacks"]
        assert ep.rewards.sum() == 0.0 and ep.progress.max() == 0.0  # progress held
        assert tracker.deferred_stats()["answer_timeouts"] == 2
        assert "answer_timeout_s=0.05" in caplog.text and "fallback" in caplog.text


def test_a_late_answer_raises_with_a_fail_fast_client(slow: EmbeddedService) -> None:
    with ProgressClient(slow.url, fail_on_request_error=True) as client:
        tracker = ProgressTracker(client, {**SCHEDULE, "answer_timeout_s": 0.05})
        episode(tracker)
        with pytest.raises(RewardServiceError, match="within answer_timeout_s=0.05"):
            tracker.settled(wait=True)


def test_an_abandoned_episode_is_dropped(slow: EmbeddedService) -> None:
    with ProgressClient(slow.url) as client:
        tracker = ProgressTracker(client, SCHEDULE)
        tracker.reset("paint the frame", paint(0))
        tracker.observe(1, paint(10))
        tracker.observe(2, paint(20))  # a check is out
        episode(tracker)
        settled = tracker.settled(wait=True)
        assert [ep.index for ep in settled] == [2]
        assert tracker.deferred_stats()["abandoned"] == 1


def test_a_dead_service_fails_at_start_up() -> None:
    with pytest.raises(ServiceUnavailableError, match="127.0.0.1:9"):
        make_env(
            env_factory=SyntheticProgressEnv,
            max_episode_steps=4,
            reward_model={"enable": True, "endpoint": "http://127.0.0.1:9", "calls": "deferred"},
        )


def test_deferred_is_refused_with_a_clear_error_when_misspelt() -> None:
    from evolve_envs import ConfigError
    from evolve_envs.progress.tracker_config import TrackerConfig

    with pytest.raises(ConfigError, match="calls: expected one of 'sync', 'async' or 'deferred'"):
        TrackerConfig(calls="defered")


def test_settled_rewards_refuses_a_stack_that_does_not_defer(slow: EmbeddedService) -> None:
    import gymnasium as gym

    from evolve_envs.wrappers.settled_rewards import SettledRewards

    def build() -> gym.Env:
        rm = {"enable": True, "endpoint": slow.url, "calls": "async"}
        return make_env(env_factory=SyntheticProgressEnv, max_episode_steps=4, reward_model=rm)

    vec = gym.vector.SyncVectorEnv([build])
    with pytest.raises(ValueError, match=r"calls: deferred \(found calls: \['async'\]\)"):
        SettledRewards(vec)
    vec.close()


def test_recording_a_deferred_stack_is_refused(tmp_path) -> None:
    from evolve_envs import ConfigError

    rm = {"enable": True, "endpoint": "http://127.0.0.1:9", "calls": "deferred"}
    with pytest.raises(ConfigError, match="record: .* calls: sync or async"):
        make_env(
            {"reward_model": rm, "record": {"dir": str(tmp_path)}},
            env_factory=SyntheticProgressEnv,
            max_episode_steps=4,
        )


def test_an_ended_episode_is_handed_on_once_its_answer_is_back() -> None:
    s = TrackerConfig(mode="incremental", calls="deferred")
    clock = lambda: 0.0  # noqa: E731
    book = DeferredSettlement(
        s,
        REQUEST_MODES[s.mode](s),
        AnswerTiming(clock),
        TerminationAudit(),
        strict=False,
        clock=clock,
    )
    ledger = book.start(1, EpisodeState(task="open the drawer"))
    for t in (1, 2):
        ledger.played(t, env_success=False)
    critic: Future[CallResult[object]] = Future()
    ledger.ep.pending.append(PendingCheck(step=1, base_step=0, milestone=True, critic=critic))
    book.end(ledger, env_terminated=False, env_truncated=True)
    assert book.settled() == []  # the answer is not back
    critic.set_result(CallResult(40.0, ok=True, fallback=False, latency_s=0.5, endpoint=None))
    [ep] = book.settled()
    assert ep.rewards.tolist() == [0.4, 0.0]  # paid at the check's own step
    assert ep.progress.tolist() == [40.0, 40.0] and ep.truncated
