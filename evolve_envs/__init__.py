"""evolve-envs: LIBERO as Gymnasium environments with reward-model shaping, and RL on them.

Importing the package registers ``evolve_envs/LIBERO-{10,Spatial,Object,Goal,90}-v0`` and
``evolve_envs/ReachPlace-v0``. The public API sits here; each name is imported on first use, so
``import evolve_envs`` stays light (the reward clients never load the server's dependencies):

* :func:`load_config` — an env stack's config, checked (files, shipped names, overrides);
  :class:`ConfigError` names a bad key;
* :func:`make_env` — one env with its wrapper stack, from a config;
* :func:`make_vec` — several, sharing one embedded reward service;
* :func:`open_reward_model` — a reward model's client, pool and service, as one context manager;
* :func:`train` — a training run (DistRL or GRPO on Ray) from a training config, returning a
  :class:`TrainResult`; :func:`load_train_config` checks such a config without running it;
* :func:`load_policy` — a run's trained policy, acting on raw observations
  (:class:`TrainedPolicy`).

>>> import evolve_envs
>>> env = evolve_envs.make_env("reach_place", max_episode_steps=3)
>>> env.spec.id
'evolve_envs/ReachPlace-v0'
>>> env.close()
>>> cfg = evolve_envs.load_config("reach_place", {"reward_model": {"call_every": 4}})
>>> cfg.reward_model.call_every
4
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evolve_envs.envs.registration import ENV_IDS
from evolve_envs.stack.registration import register_envs

if TYPE_CHECKING:
    from evolve_envs.progress.config_error import ConfigError
    from evolve_envs.stack.factory import make_env
    from evolve_envs.stack.loading import load_config
    from evolve_envs.stack.reward_model import RewardModel, open_reward_model
    from evolve_envs.stack.vector import make_vec
    from evolve_envs.training.api import train
    from evolve_envs.training.config import TrainConfig, load_train_config
    from evolve_envs.training.driver import TrainResult
    from evolve_envs.training.trained_policy import TrainedPolicy, load_policy

register_envs()

_LAZY = {
    "ConfigError": "evolve_envs.progress.config_error",
    "load_config": "evolve_envs.stack.loading",
    "make_env": "evolve_envs.stack.factory",
    "make_vec": "evolve_envs.stack.vector",
    "open_reward_model": "evolve_envs.stack.reward_model",
    "RewardModel": "evolve_envs.stack.reward_model",
    "train": "evolve_envs.training.api",
    "TrainConfig": "evolve_envs.training.config",
    "load_train_config": "evolve_envs.training.config",
    "TrainResult": "evolve_envs.training.driver",
    "TrainedPolicy": "evolve_envs.training.trained_policy",
    "load_policy": "evolve_envs.training.trained_policy",
}

__all__ = [
    "ENV_IDS",
    "ConfigError",
    "RewardModel",
    "TrainConfig",
    "TrainResult",
    "TrainedPolicy",
    "load_config",
    "load_policy",
    "load_train_config",
    "make_env",
    "make_vec",
    "open_reward_model",
    "register_envs",
    "train",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evolve_envs' has no attribute {name!r}")
