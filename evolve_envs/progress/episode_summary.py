"""The episode summary: ``info["episode_reward_model"]`` on an episode's last step.

>>> summary: EpisodeSummary = {"progress": 80.0, "max_progress": 95.0, "is_success": False,
...                            "done_by_progress": True, "model_terminated": True,
...                            "done_env_success": False}
>>> model_score(summary), model_score(summary, "max")
(0.8, 0.95)
>>> model_done(summary)
{'model_done': True, 'model_done_success': False}
>>> model_score({}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypedDict

__all__ = ["EpisodeSummary", "model_score", "model_done", "SUMMARY_KEYS"]


class EpisodeSummary(TypedDict, total=False):
    """``info["episode_reward_model"]``: one episode as the reward model saw it."""

    progress: float
    max_progress: float
    steps: int
    reward_model_errors: int
    model_reward: float
    is_success: bool | None
    high_progress_on_failure: bool | None
    success_at_low_progress: bool | None
    # kind: progress
    progress_calls: int
    answers: int
    reward_model_fallbacks: int
    last_error: str | None
    latency_mean_s: float
    latency_max_s: float
    lag_waits: int
    end_waits: int
    done_by_progress: bool
    done_step: int | None
    model_terminated: bool
    done_env_success: bool | None
    done_rule: str
    termination_audit: dict[str, object]
    task: str | None
    steps_played: int
    cut_steps: int
    # kind: video_score | pickle_scorer
    raw_score: float | None
    fallback: bool
    error: str | None
    latency_s: float
    frames: int


#: Every key a summary may hold (the docs list them; a test checks the wrappers against it).
SUMMARY_KEYS: frozenset[str] = frozenset(EpisodeSummary.__annotations__)


def model_score(
    summary: Mapping[str, object], which: Literal["final", "max"] = "final"
) -> float | None:
    """The model's judgement of the episode as a fraction of the task: the final (or highest)
    progress / 100; ``None`` when the summary holds none (the episode had no reward model)."""
    value = summary.get("max_progress" if which == "max" else "progress")
    return None if value is None else float(value) / 100.0


def model_done(summary: Mapping[str, object], *, terminated_only: bool = True) -> dict[str, bool]:
    """The termination audit's two counts for one episode: ``model_done`` — the model ended the
    episode (``terminated_only``), or judged the task done at all (``terminated_only=False``:
    where something else decides termination, as in RLinf) — and ``model_done_success`` — the
    env had succeeded when the model said done."""
    key = "model_terminated" if terminated_only else "done_by_progress"
    done = bool(summary.get(key, False))
    return {
        "model_done": done,
        "model_done_success": done and bool(summary.get("done_env_success")),
    }
