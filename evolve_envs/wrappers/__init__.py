"""Gymnasium wrappers: thin adapters that turn reward-model judgements into rewards and ends.

Each wrapper has one concern and drives the Gymnasium-free core in :mod:`evolve_envs.progress`.
They are exported here, as :mod:`gymnasium.wrappers` exports its own, and imported on first use
(``import evolve_envs.wrappers`` loads none of them):

>>> from evolve_envs.wrappers import ProgressReward
>>> ProgressReward.__module__
'evolve_envs.wrappers.progress_reward'
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "EpisodeScoreReward": "evolve_envs.wrappers.episode_score",
    "FrameCache": "evolve_envs.wrappers.frame_cache",
    "HackingAlarm": "evolve_envs.wrappers.hacking_alarm",
    "LentClient": "evolve_envs.wrappers.model_handle",
    "lend": "evolve_envs.wrappers.model_handle",
    "ModelSuccessBonus": "evolve_envs.wrappers.model_success_bonus",
    "ProgressReward": "evolve_envs.wrappers.progress_reward",
    "ProgressiveHorizon": "evolve_envs.wrappers.progressive_horizon",
    "RecordEpisodes": "evolve_envs.wrappers.record_episodes",
    "SettledRewards": "evolve_envs.wrappers.settled_rewards",
    "SettledRollout": "evolve_envs.wrappers.settled_rewards",
    "settled_episodes": "evolve_envs.wrappers.settled_rewards",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evolve_envs.wrappers' has no attribute {name!r}")
