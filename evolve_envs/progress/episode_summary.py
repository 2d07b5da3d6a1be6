"""The episode summary: ``info["episode_reward_model"]`` on an episode's last step.

Both reward wrappers write one: :class:`~evolve_envs.wrappers.progress_reward.ProgressReward`
(``kind: progress``) and :class:`~evolve_envs.wrappers.episode_score.EpisodeScoreReward`
(``kind: video_score | pickle_scorer``). :class:`EpisodeSummary` is its one type, and its one
scale: **progress is in percent of the task, 0–100**, for every kind (the per-step
``info["progress"]`` uses the same scale). An episode scorer's answer in [0, 1] is reported as
``progress = max_progress = 100 * score``.

Everything that reads a summary — the rollout report, the DistRL workers, the RLinf adapter, the
hacking alarm, the recordings — goes through the helpers here for what it derives from it
(:func:`model_score`, :func:`model_done`), so no reader converts scales or spells the derived
keys again.

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
from typing import Any, Literal, TypedDict

__all__ = ["EpisodeSummary", "model_score", "model_done", "SUMMARY_KEYS"]


class EpisodeSummary(TypedDict, total=False):
    """``info["episode_reward_model"]``: one episode as the reward model saw it.

    Keys every reward wrapper writes:
        progress: final progress, percent of the task (0–100).
        max_progress: highest progress of the episode, percent.
        steps: steps of the episode.
        reward_model_errors: failed reward-model calls.
        model_reward: the episode's model reward (before ``reward_weight``).
        is_success: the env's success flag at the end (``None`` when the env has none).
        high_progress_on_failure: the model judged the task done, the env did not succeed.
        success_at_low_progress: the env succeeded, the model did not judge it done.

    ``kind: progress`` (:class:`~evolve_envs.progress.tracker.ProgressTracker`) also:
        progress_calls, answers, reward_model_fallbacks, last_error, latency_mean_s,
        latency_max_s, lag_waits, end_waits: the calls of the episode and how they went;
        done_by_progress, done_step, done_rule, model_terminated, done_env_success: the
        model's done decision, whether it ended the episode and whether the env had succeeded
        then; termination_audit: the running counts of the task; task: the task text.
        steps_played, cut_steps (``calls: deferred``): the steps the env played, and those of
        them played after a model done, cut from the episode (``steps`` is what remains).

    ``kind: video_score | pickle_scorer`` also:
        raw_score: the service's answer (``None`` on failure); fallback, error, latency_s: the
        scoring call; frames: frames the episode kept.
    """

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
    termination_audit: dict[str, Any]
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
    summary: Mapping[str, Any], which: Literal["final", "max"] = "final"
) -> float | None:
    """The model's judgement of the episode as a fraction of the task: the final (or highest)
    progress / 100; ``None`` when the summary holds none (the episode had no reward model)."""
    value = summary.get("max_progress" if which == "max" else "progress")
    return None if value is None else float(value) / 100.0


def model_done(summary: Mapping[str, Any], *, terminated_only: bool = True) -> dict[str, bool]:
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
