"""What a tracker reports: the per-step ``info`` keys and the settled episode's summary.

>>> ep = EpisodeState(task="open the drawer", progress=40.0, calls=2)
>>> info = step_info(ep, checked=True)
>>> info["progress"], info["progress_checked"], info["progress_calls"]
(40.0, True, 2)
"""

from __future__ import annotations

from evolve_envs.progress.arithmetic import as_fraction, reached
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.episode_state import EpisodeState
from evolve_envs.progress.tracker_config import TrackerConfig

__all__ = ["step_info", "episode_summary", "close_episode"]


def step_info(ep: EpisodeState, checked: bool = False, fallback: bool = False) -> dict[str, object]:
    """The per-step ``info`` keys for the episode's current state (after ``reset``: zeros)."""
    return {
        "progress": ep.progress,
        "progress_checked": checked,
        "progress_calls": ep.calls,
        "progress_pending": len(ep.pending),
        "reward_model_latency_s": ep.last_latency_s,
        "reward_model_errors": ep.errors,
        "reward_model_fallback": fallback,
        "done_by_progress": ep.done,
    }


def episode_summary(
    ep: EpisodeState, s: TrackerConfig, audit: TerminationAudit
) -> dict[str, object]:
    """The summary of the settled episode ``ep`` (``info["episode_reward_model"]``), with the
    running termination counts of its task from ``audit``.

    >>> ep = EpisodeState(task="open the drawer", progress=40.0, finished=True)
    >>> summary = episode_summary(ep, TrackerConfig(), TerminationAudit())
    >>> summary["progress"], summary["high_progress_on_failure"], summary["task"]
    (40.0, None, 'open the drawer')
    """
    judged_done = reached(as_fraction(ep.progress), s.done_threshold, s.done_comparison)
    success = ep.env_success
    return {
        "progress": ep.progress,
        "max_progress": ep.max_progress,
        "steps": ep.step,
        "progress_calls": ep.calls,
        "answers": ep.answers,
        "reward_model_errors": ep.errors,
        "reward_model_fallbacks": ep.fallbacks,
        "last_error": ep.last_error,
        "latency_mean_s": ep.latency_total_s / ep.answers if ep.answers else 0.0,
        "latency_max_s": ep.latency_max_s,
        "lag_waits": ep.lag_waits,
        "end_waits": ep.end_waits,
        "done_by_progress": ep.done,
        "done_step": ep.done_step,
        "model_reward": ep.model_reward,
        "is_success": success,
        "high_progress_on_failure": None if success is None else (judged_done and not success),
        "success_at_low_progress": None if success is None else (success and not judged_done),
        "task": ep.task,
        "done_rule": s.rule.describe(),
        "model_terminated": ep.done and s.terminate_on_done,
        "done_env_success": ep.done_env_success,
        "termination_audit": audit.counts(ep.task),
    }


def close_episode(ep: EpisodeState, s: TrackerConfig, audit: TerminationAudit) -> dict[str, object]:
    """Count the settled episode ``ep`` in ``audit`` and return its summary
    (:func:`episode_summary`); both call modes' settlements end an episode here.

    >>> audit = TerminationAudit()
    >>> close_episode(EpisodeState(task="t", finished=True), TrackerConfig(), audit)["task"]
    't'
    """
    audit.record(
        ep.task,
        model_done=ep.done,
        success_at_done=ep.done_env_success,
        env_success=ep.env_success,
    )
    return episode_summary(ep, s, audit)
