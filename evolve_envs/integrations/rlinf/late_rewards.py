"""Late rewards: ``calls: deferred`` in RLinf, each settled step written where it was played.

The wrapper returns each chunk with the env's reward part and notes where each step was played
(:class:`LateRewardBook`); settled episodes, rewarded by the one reward step
(:class:`~evolve_envs.progress.reward_step.RewardStep`), become :class:`LateReward` entries
(``sync``'s reward of that step, and a model done), which the env worker writes into its stored
rollout.

>>> import numpy as np, torch
>>> from evolve_envs.progress.settled_episode import SettledEpisode
>>> from evolve_envs.progress.reward_step import RewardStep
>>> book = LateRewardBook(num_envs=1, step=RewardStep())
>>> book.start(0, episode=1)
>>> for action in range(3):
...     paid = book.played(0, chunk=0, action=action, env_reward=0.0)
>>> record = SettledEpisode(index=1, task="t", steps_played=3, length=2,
...     rewards=np.array([0.0, 0.5]), model_rewards=np.array([0.0, 0.5]),
...     progress=np.array([0.0, 50.0]), terminated=True, truncated=False)
>>> late = book.place(0, record)
>>> rewards, dones = [torch.zeros((1, 3))], [torch.zeros((1, 3), dtype=torch.bool)]
>>> write_late_rewards(rewards, dones, {0: (0, 0)}, late, terminations=dones)
1
>>> rewards[0].tolist(), dones[0].tolist()  # the third step was played after the model's done
([[0.0, 0.5, 0.0]], [[False, True, False]])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from typing import Protocol, SupportsFloat

import numpy as np

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.progress.reward_step import RewardStep
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.tracker import ProgressTracker

__all__ = [
    "LateReward",
    "LateRewardBook",
    "check_late_rewards_exact",
    "settle_trackers",
    "write_late_rewards",
]


class Cells(Protocol):
    """A stored ``[N, C]`` tensor of RLinf's rollout (item get and set by ``(n, c)``)."""

    def __getitem__(self, key: tuple[int, int]) -> SupportsFloat: ...

    def __setitem__(self, key: tuple[int, int], value: float | bool) -> None: ...


@dataclass(frozen=True)
class LateReward:
    """Sub-env ``env``'s settled ``reward`` at ``(chunk, action)``; ``paid``: what is stored there
    so far; ``terminated``: the model's done ends the episode here."""

    chunk: int
    action: int
    env: int
    reward: float
    paid: float
    terminated: bool


@dataclass
class _Played:
    where: list[tuple[int, int]] = field(default_factory=list)
    env_rewards: list[float] = field(default_factory=list)
    paid: list[float] = field(default_factory=list)
    ended_at: int | None = None


class LateRewardBook:
    """Where each sub-env's steps were played, per episode, until the episode is settled;
    ``step`` rewards the settled episodes (the adapter's reward step)."""

    def __init__(self, num_envs: int, step: RewardStep, *, model_ends: bool = True) -> None:
        self.step = step
        self.model_ends = bool(model_ends)
        self._episodes: list[dict[int, _Played]] = [{} for _ in range(num_envs)]
        self._current = [0] * num_envs

    def start(self, i: int, episode: int) -> None:
        """Sub-env ``i`` starts its tracker's episode number ``episode``."""
        self._current[i] = int(episode)
        self._episodes[i][int(episode)] = _Played()

    def drop(self, i: int) -> None:
        """Sub-env ``i``'s open episode is abandoned by a reset (its record never comes)."""
        self._episodes[i].pop(self._current[i], None)

    def played(self, i: int, *, chunk: int, action: int, env_reward: float) -> float:
        """Sub-env ``i`` played the next step of its episode at ``(chunk, action)`` with the
        env's ``env_reward``; returns what is paid for it now (the env's part of the reward)."""
        paid = self.step.terms.mix(float(env_reward), 0.0)
        ep = self._episodes[i].get(self._current[i])
        if ep is not None:
            ep.where.append((int(chunk), int(action)))
            ep.env_rewards.append(float(env_reward))
            ep.paid.append(paid)
        return paid

    @property
    def open_steps(self) -> int:
        """Steps noted and not settled yet, over all sub-envs."""
        return sum(len(ep.where) for eps in self._episodes for ep in eps.values())

    def place(self, i: int, record: SettledEpisode) -> list[LateReward]:
        """What changes where sub-env ``i`` played ``record``'s steps (cut steps get nothing)."""
        ep = self._episodes[i].get(int(record.index))
        if ep is None:
            return []
        n = min(int(record.length), len(ep.where))
        rewards = self.step.episode(record, ep.env_rewards).rewards
        ends = self.model_ends and record.terminated and ep.ended_at is None
        out = []
        for s in range(n):
            want = float(rewards[s])
            end_here = ends and s == n - 1
            if want == ep.paid[s] and not end_here:
                continue
            chunk, action = ep.where[s]
            out.append(LateReward(chunk, action, i, want, ep.paid[s], end_here))
            ep.paid[s] = want
        if ends:
            ep.ended_at = n
        if record.final:
            del self._episodes[i][int(record.index)]
        return out


def settle_trackers(trackers: Sequence[ProgressTracker], book: LateRewardBook) -> list[LateReward]:
    """Every step's reward settled since the last call, waiting for the answers sent so far; a
    running episode pays its steps so far, and a model done found now ends it at its check."""
    out: list[LateReward] = []
    for i, tracker in enumerate(trackers):
        running = tracker.running_episode(wait=True)
        if running is not None and running.terminated:
            tracker.finish()  # cut at the check that judged it done, as sync ends it there
            running = None
        for record in [*tracker.settled(wait=True), *([running] if running else [])]:
            out.extend(book.place(i, record))
    return out


def write_late_rewards(
    rewards: MutableSequence[Cells],
    dones: MutableSequence[Cells],
    slots: Mapping[int, tuple[int, int]],
    late: Iterable[LateReward],
    *,
    terminations: MutableSequence[Cells],
) -> int:
    """Write ``late`` into a stored rollout (``slots``: chunk step -> its index in ``rewards``
    and in ``dones``); returns the count. A value RLinf added (its bootstrap value) is kept."""
    count = 0
    for item in late:
        if item.chunk not in slots:
            raise RuntimeError(
                f"a settled reward for chunk step {item.chunk} of sub-env {item.env}, which is "
                "no part of the rollout being sent"
            )
        k_reward, k_done = slots[item.chunk]
        cell = (item.env, item.action)
        extra = float(rewards[k_reward][cell]) - float(np.float32(item.paid))
        rewards[k_reward][cell] = item.reward + extra
        if item.terminated:
            terminations[k_done][cell] = True
            dones[k_done][cell] = True
        count += 1
    return count


def check_late_rewards_exact(*, auto_reset: bool, model_ends: bool, is_eval: bool) -> None:
    """Refuse ``calls: deferred`` where a late answer would change what the env did."""
    if auto_reset and model_ends:
        raise ConfigError(
            "reward_model.calls: 'deferred' with env auto_reset: true needs a model that never "
            "ends episodes (terminate_on_done: false or ignore_terminations: true); a model "
            "done resets the sub-env; use calls: async (docs/rlinf.md, #late-rewards-in-rlinf)"
        )
    if is_eval:
        raise ConfigError(
            "reward_model.calls: 'deferred' applies to env.train only; an evaluation env's "
            "rewards are never stored, so use calls: sync or async under env.eval"
        )
