"""Settled episodes in a rollout worker (``reward_model.calls: deferred``; docs/DISTRL.md): how
a worker finds its env's settled episodes and counts them.

The env never waits for the reward model; each env's
:class:`~evolve_envs.training.episode.EpisodeSlot` keeps what the policy saw and did until the
episode's record arrives with its rewards (:func:`settled_source`, the env's declared deferred
reward wrapper), and hands on what ``calls: sync`` would have produced for the same actions.

>>> from evolve_envs.stack.config import StackConfig
>>> is_deferred(StackConfig(reward_model={"enable": True, "calls": "deferred"}))
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from evolve_envs.stack.config import StackConfig
from evolve_envs.training.episode import EpisodeSlot, SettledSource
from evolve_envs.wrappers.settled_rewards import deferred_reward

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "SETTLING_COUNTS",
    "episode_index",
    "is_deferred",
    "saturation_waits",
    "settled_source",
    "settling_counts",
]

#: A worker's settlement counters (all 0 without deferred settlement): episodes settled, steps
#: cut after a model-judged done, ended episodes not settled yet (a level, not a count), and
#: resets that waited for the reward service (the env at ``max_unsettled_episodes``).
SETTLING_COUNTS: dict[str, int] = {
    "settled": 0,
    "cut_steps": 0,
    "unsettled": 0,
    "saturation_waits": 0,
}


def settling_counts(slots: Sequence[EpisodeSlot], envs: Sequence[gym.Env]) -> dict[str, int]:
    """:data:`SETTLING_COUNTS` of a worker's slots and envs."""
    return {
        "settled": sum(s.settled for s in slots),
        "cut_steps": sum(s.cut_steps for s in slots),
        "unsettled": sum(s.in_flight for s in slots),
        "saturation_waits": saturation_waits(envs),
    }


def is_deferred(stack: StackConfig) -> bool:
    """Whether a stack config asks for settled episodes (reward model on, ``calls: deferred``)."""
    rm = stack.reward_model
    return rm.enable and getattr(rm, "calls", None) == "deferred"


def settled_source(env: gym.Env) -> SettledSource:
    """The env's settled-episode call: its declared deferred reward wrapper's."""
    return deferred_reward(env).settled_episodes


def episode_index(info: Mapping[str, object]) -> int:
    """The number the env gives the episode its ``reset`` just started
    (``info["episode_number"]``), which its settled record carries as ``index``.

    Raises ``ValueError`` when the env reports none (its stack has no reward model in
    ``calls: deferred``)."""
    if "episode_number" not in info:
        raise ValueError(
            "the env reports no episode_number: its stack has no ProgressReward to settle "
            "its episodes (reward_model.calls: deferred with kind: progress)"
        )
    return int(info["episode_number"])


def saturation_waits(envs: Sequence[gym.Env]) -> int:
    """Resets that waited because the env had ``max_unsettled_episodes`` episodes unsettled
    (the reward service is saturated), summed over ``envs``."""
    total = 0
    for env in envs:
        total += int(deferred_reward(env).deferred_stats().get("saturation_waits", 0))
    return total
