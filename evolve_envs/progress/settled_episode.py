"""SettledEpisode: one episode as a trainer learns from it under ``calls: deferred``.

Under deferred settlement an env never waits for the reward model: the rewards of an episode are
known only once its last answer is in. :class:`SettledEpisode` is what is handed on then — the
per-step rewards, the progress after each step and the episode's end, exactly what ``calls:
sync`` would have produced for the same actions, plus how many steps were played after a model
done and cut (they are not part of the episode). ``ProgressTracker.settled()`` returns them;
``ProgressReward.settled_episodes()`` returns them with the whole stack's rewards.

>>> import numpy as np
>>> ep = SettledEpisode(index=1, task="open the drawer", steps_played=5, length=3,
...                     rewards=np.array([0.0, 0.5, 0.5]), model_rewards=np.array([0.0, 0.5, 0.5]),
...                     progress=np.array([0.0, 50.0, 100.0]), terminated=True, truncated=False,
...                     summary={"progress": 100.0})
>>> ep.cut_steps, float(ep.rewards.sum()), ep.final
(2, 1.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SettledEpisode"]


@dataclass(frozen=True)
class SettledEpisode:
    """One settled episode (see the module docstring). Step ``t`` (1 = after the first action)
    is at index ``t - 1`` of every array.

    Attributes:
        index: the episode's number on its tracker (1 for the first ``reset``), in the order the
            episodes were played; ``info["settlement_episode"]`` carries it on every step.
        task: the task text.
        steps_played: env steps the env played in the episode.
        length: the steps that belong to it: ``steps_played``, or the step of the check whose
            answer judged the task done (``terminate_on_done``), where ``sync`` would have ended.
        rewards: ``float64[length]``, the reward of each step as ``sync`` pays it: the model part
            here; with the wrapper stack's other parts (env reward weight, success bonus) when it
            comes from ``ProgressReward.settled_episodes()``.
        model_rewards: ``float64[length]``, the model part alone (``reward_coef`` applied,
            before ``reward_weight``).
        progress: ``float64[length]``, progress in [0, 100] after each step.
        terminated: the episode ends terminated at step ``length`` (the env's termination, or a
            model done).
        truncated: the episode ends truncated at step ``length`` (the time limit).
        summary: the episode summary (``info["episode_reward_model"]`` under ``sync``;
            :class:`~evolve_envs.progress.episode_summary.EpisodeSummary`) with ``steps_played``
            and ``cut_steps``; empty for a view of an episode still running.
        final: ``False`` for a view of the running episode
            (``ProgressTracker.running_episode``): its steps so far, whose rewards are final, but
            the episode goes on.
        alarm: the reward-hacking alarm's state after this episode (``info["reward_alarm"]``
            under ``sync``), when the stack has ``HackingAlarm``; else ``None``.
    """

    index: int
    task: str
    steps_played: int
    length: int
    rewards: np.ndarray
    model_rewards: np.ndarray
    progress: np.ndarray
    terminated: bool
    truncated: bool
    summary: dict[str, Any] = field(default_factory=dict)
    final: bool = True
    alarm: dict[str, Any] | None = None

    @property
    def cut_steps(self) -> int:
        """Steps played after a model done (not part of the episode)."""
        return self.steps_played - self.length

    @property
    def total_reward(self) -> float:
        return float(self.rewards.sum())
