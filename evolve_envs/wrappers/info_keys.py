"""The ``info`` keys of the stack, declared once.

>>> [key.names for key in INFO_KEYS["HackingAlarm"]]
[('reward_alarm',)]
>>> print(markdown_table("HackingAlarm").splitlines()[0])
| key | type | when | meaning |
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InfoKey", "INFO_KEYS", "keys_of", "markdown_table"]


@dataclass(frozen=True)
class InfoKey:
    """One row of the info-key tables: the key(s), their type, when they are present, meaning."""

    names: tuple[str, ...]
    type: str
    when: str
    meaning: str


#: producer -> the keys it adds (``ProgressiveHorizon`` is the time limit's row set; a plain
#: ``TimeLimit`` adds none).
INFO_KEYS: dict[str, tuple[InfoKey, ...]] = {
    "LiberoEnv": (
        InfoKey(
            ("task_description",),
            "str",
            "reset, step",
            "the task's language instruction (sent to the reward model)",
        ),
        InfoKey(
            ("task_name", "suite", "task_id", "init_state_id"),
            "str / int",
            "reset, step",
            "which task and init state",
        ),
        InfoKey(
            ("is_success",),
            "bool",
            "reset, step",
            "LIBERO's `check_success()` for the current state (the reward wrappers guarantee the key exists)",
        ),
        InfoKey(
            ("rendered_cameras",),
            "list[str]",
            "reset, step",
            "the image keys that hold this step's frame; with `render_cameras: on_demand` the "
            "others hold zeros until a reader draws them (`camera_frame`)",
        ),
    ),
    "ProgressiveHorizon": (
        InfoKey(
            ("max_episode_steps",),
            "int",
            "reset, step (`ProgressiveHorizon`)",
            "the current stage's max episode steps",
        ),
        InfoKey(
            ("horizon_stage",),
            "int",
            "reset, step (`ProgressiveHorizon`)",
            "index of the current stage",
        ),
    ),
    "ProgressReward": (
        InfoKey(
            ("progress",),
            "float 0–100",
            "reset, step",
            "task progress after every reward-model answer applied so far (0 at reset)",
        ),
        InfoKey(
            ("progress_checked",),
            "bool",
            "reset, step",
            "at least one check answer was applied at this step (in sync mode: this step was a scheduled check)",
        ),
        InfoKey(
            ("progress_calls",),
            "int",
            "reset, step",
            "reward-model requests sent in this episode (a check with `done_by` other than `threshold` sends two)",
        ),
        InfoKey(
            ("progress_pending",),
            "int",
            "reset, step",
            "requests sent and not yet applied (async mode; 0 after the last step)",
        ),
        InfoKey(
            ("reward_model_latency_s",),
            "float",
            "reset, step",
            "latency of the most recent answer applied in this episode (0.0 before the first)",
        ),
        InfoKey(
            ("reward_model_errors",),
            "int",
            "reset, step",
            "failed reward-model calls in this episode",
        ),
        InfoKey(
            ("reward_model_fallback",),
            "bool",
            "reset, step",
            "a failed call was answered with the fallback at this step (progress held)",
        ),
        InfoKey(
            ("done_by_progress",),
            "bool",
            "reset, step",
            "the reward model has judged the task done in this episode (threshold and/or backend `/done`, per `done_by`)",
        ),
        InfoKey(
            ("reward_model_id",),
            "str or None",
            "reset, step",
            "the model the service says answers (`mock-change`: the mock backend's rule, a stand-in that warns once when it ends an episode); None when it did not say",
        ),
        InfoKey(("env_reward",), "float", "step", "the wrapped env's reward before mixing"),
        InfoKey(
            ("reward_model_reward",),
            "float",
            "step",
            "the model part of this step's reward (before `reward_weight`)",
        ),
        InfoKey(
            ("episode_reward_model",),
            "dict",
            "last step (not under `calls: deferred`)",
            "episode summary, below (under `calls: deferred` it comes with the settled episode)",
        ),
        InfoKey(
            ("episode_number", "episode_step"),
            "int",
            "reset, step",
            "the episode's number on this env (1 at the first reset) and the step (0 at reset): what a settled episode (`calls: deferred`) is matched with",
        ),
    ),
    "EpisodeScoreReward": (
        InfoKey(
            ("reward_model_errors",),
            "int",
            "reset, step",
            "failed scoring calls in this episode (0 or 1)",
        ),
        InfoKey(
            ("reward_model_fallback",),
            "bool",
            "reset, step",
            "the episode score fell back to the env's success flag at this step",
        ),
        InfoKey(
            ("reward_model_latency_s",),
            "float",
            "reset, step",
            "latency of the scoring call (on the last step; 0.0 otherwise)",
        ),
        InfoKey(("env_reward",), "float", "step", "the wrapped env's reward before mixing"),
        InfoKey(("reward_model_reward",), "float", "step", "the model part of this step's reward"),
        InfoKey(
            ("env_terminated",),
            "bool",
            "step, with `ignore_terminations`",
            "the env's own termination, hidden from `terminated`",
        ),
        InfoKey(
            ("episode_score",),
            "float",
            "last step",
            "the score after `binary_reward` (before `reward_coef`)",
        ),
        InfoKey(
            ("episode_reward_model",),
            "dict",
            "last step",
            "the episode summary: `progress` and `max_progress` (100 × the score, percent like every summary), `raw_score` (the service's answer, `None` on failure), `fallback`, `error`, `latency_s`, `frames`, `steps`, `reward_model_errors`, `model_reward`, `is_success`, `high_progress_on_failure` (raw score ≥ `success_threshold` on a failed episode), `success_at_low_progress` (success with a raw score below it)",
        ),
    ),
    "HackingAlarm": (
        InfoKey(
            ("reward_alarm",),
            "dict",
            "last step",
            "the alarm's state for the episode's task: `task`, `episodes`, `ready`, `progress_recent` / `_baseline` / `_rise`, `success_recent` / `_baseline` / `_rise`, `high_failure_recent` / `_baseline` / `_rise`, `progress_without_success`, `high_progress_failures`, `firing`, `triggers` (see [Online alarm and audited termination](trust.md#online-alarm-and-audited-termination))",
        ),
    ),
}


def keys_of(producer: str) -> set[str]:
    """Every key name ``producer`` declares."""
    return {name for key in INFO_KEYS[producer] for name in key.names}


def markdown_table(producer: str) -> str:
    """The docs table of ``producer``'s keys."""
    rows = ["| key | type | when | meaning |", "|---|---|---|---|"]
    for key in INFO_KEYS[producer]:
        names = ", ".join(f"`{name}`" for name in key.names)
        rows.append(f"| {names} | {key.type} | {key.when} | {key.meaning} |")
    return "\n".join(rows) + "\n"
