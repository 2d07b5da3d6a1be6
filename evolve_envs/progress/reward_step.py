"""The reward step: how an episode's model judgement becomes its rewards, written once.

Every reward a trainer learns from is made here, whenever it is made:

* :class:`RewardTerms` holds the formula, ``env_reward_weight * env + reward_weight * model``
  plus the success bonus on an episode's last step (:meth:`RewardTerms.mix`,
  :meth:`RewardTerms.bonus`);
* :class:`RewardStep` applies it, with the hacking alarm fed once per finished episode. Its
  :meth:`~RewardStep.end` is the last step of an episode as it returns (``calls: sync`` and
  ``async``); :meth:`~RewardStep.episode` is a whole episode whose model rewards came later
  (``calls: deferred``). The reward wrappers, the trainers' settled episodes and the RLinf
  worker all call these, so the timing of a reward changes when it is computed, never what it is.

>>> import numpy as np
>>> from evolve_envs.progress.settled_episode import SettledEpisode
>>> step = RewardStep(RewardTerms(reward_weight=1.0, env_reward_weight=0.5, success_bonus=1.0))
>>> step.terms.mix(1.0, 0.25)                     # one step: 0.5 * 1 + 1 * 0.25
0.75
>>> ep = SettledEpisode(index=0, task="t", steps_played=2, length=2, rewards=np.zeros(2),
...                     model_rewards=np.array([0.5, 0.5]), progress=np.array([50.0, 100.0]),
...                     terminated=True, truncated=False, summary={"progress": 100.0})
>>> step.episode(ep, env_rewards=[0.0, 1.0]).rewards.tolist()   # the bonus on the last step
[0.5, 2.0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from evolve_envs.progress.episode_summary import model_score
from evolve_envs.progress.hacking import HackingDetector
from evolve_envs.progress.settled_episode import SettledEpisode

__all__ = ["RewardStep", "RewardTerms", "StepEnd"]

_R = TypeVar("_R", float, np.ndarray)


@dataclass(frozen=True)
class RewardTerms:
    """The reward formula's weights and the success bonus (``reward_model.reward_weight``,
    ``env_reward_weight``, ``success_bonus`` and its threshold, 0..1 of final progress).

    >>> RewardTerms(success_bonus=2.0, bonus_threshold=0.9).bonus({"progress": 95.0})
    2.0
    """

    reward_weight: float = 1.0
    env_reward_weight: float = 0.0
    success_bonus: float = 0.0
    bonus_threshold: float = 0.95

    def __post_init__(self) -> None:
        if not 0.0 <= self.bonus_threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.bonus_threshold}")

    def mix(self, env_reward: _R, model_reward: _R, bonus: _R | float = 0.0) -> _R:
        """The reward of a step (floats) or of many steps (arrays): the one place the formula
        is written."""
        return self.env_reward_weight * env_reward + self.reward_weight * model_reward + bonus

    def bonus(self, summary: Mapping[str, object] | None) -> float:
        """The bonus an episode earns from its reward-model summary: ``success_bonus`` when the
        final progress (percent) is at least ``100 * bonus_threshold``, else 0."""
        if self.success_bonus and isinstance(summary, Mapping):
            progress = summary.get("progress")
            # rounded like the tracker's done rule, so accumulation noise cannot flip it
            if progress is not None and round(float(progress) / 100.0, 9) >= self.bonus_threshold:
                return float(self.success_bonus)
        return 0.0


@dataclass(frozen=True)
class StepEnd:
    """What the reward step adds at an episode's last step: the ``bonus`` paid (None: no bonus
    is configured) and the alarm's state (None: no alarm, or no score to feed it)."""

    bonus: float | None
    alarm: dict[str, object] | None

    def info(self) -> dict[str, object]:
        """The ``info`` keys of the last step: ``success_bonus``, ``reward_alarm`` when set."""
        out: dict[str, object] = {}
        if self.bonus is not None:
            out["success_bonus"] = self.bonus
        if self.alarm is not None:
            out["reward_alarm"] = self.alarm
        return out


class RewardStep:
    """The formula (:class:`RewardTerms`) and the hacking alarm, applied to a step or a whole
    episode (see the module docstring). ``alarm`` is the env's detector (None: no alarm); ``task``
    overrides the task text the alarm files an episode under."""

    def __init__(
        self,
        terms: RewardTerms | None = None,
        alarm: HackingDetector | None = None,
        task: str | None = None,
    ) -> None:
        self.terms = terms if terms is not None else RewardTerms()
        self.alarm = alarm
        self.task = task

    def end(
        self, summary: Mapping[str, object] | None, task: str | None, success: bool | None
    ) -> StepEnd:
        """An episode ended with reward-model ``summary``: the bonus it earns and the alarm's
        state after it (``success``: the env's flag, else the summary's)."""
        bonus = self.terms.bonus(summary) if self.terms.success_bonus > 0 else None
        alarm = None
        if self.alarm is not None and summary:
            score = model_score(summary, self.alarm.settings.score)
            task = self.task if self.task is not None else task
            if score is not None and task is not None:
                flag = summary.get("is_success", False) if success is None else success
                alarm = self.alarm.add(task, score, bool(flag))
        return StepEnd(bonus, alarm)

    def episode(self, ep: SettledEpisode, env_rewards: Sequence[float] | None) -> SettledEpisode:
        """``ep`` rewarded: each step's reward from the formula, the bonus on the last step of a
        finished episode and the alarm fed with it (``env_rewards``: the env's reward per step
        played; None or short: 0 for the steps it lacks)."""
        env = np.zeros(ep.length)
        if env_rewards is not None:
            given = np.asarray(env_rewards, dtype=np.float64)[: ep.length]
            env[: given.shape[0]] = given
        bonus = np.zeros(ep.length)
        alarm = ep.alarm
        if ep.final and ep.length:
            end = self.end(ep.summary, ep.task, ep.summary.get("is_success"))
            bonus[-1] = end.bonus or 0.0
            alarm = end.alarm if end.alarm is not None else alarm
        rewards = self.terms.mix(env, np.asarray(ep.model_rewards, dtype=np.float64), bonus)
        return dataclasses.replace(ep, rewards=rewards, alarm=alarm)
