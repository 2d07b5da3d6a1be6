"""evolve-envs: LIBERO as Gymnasium environments with reward-model shaping.

Importing the package registers ``evolve_envs/LIBERO-{10,Spatial,Object,Goal,90}-v0`` and
``evolve_envs/ReachPlace-v0``. The public API sits here; each name is imported on first use, so
``import evolve_envs`` stays light (the reward clients never load the server's dependencies):

* :func:`make_env` — one env with its wrapper stack, from a config (``evolve_envs.stack.factory``);
* :func:`make_vec` — several, sharing one embedded reward service (``evolve_envs.stack.vector``);
* :func:`open_reward_model` — a reward model's client, pool and service, as one context manager
  (``evolve_envs.stack.reward_model``).

>>> import evolve_envs
>>> env = evolve_envs.make_env("reach_place", max_episode_steps=3)
>>> env.spec.id
'evolve_envs/ReachPlace-v0'
>>> env.close()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evolve_envs.envs.registration import ENV_IDS
from evolve_envs.stack.registration import register_envs

if TYPE_CHECKING:
    from evolve_envs.stack.factory import make_env
    from evolve_envs.stack.reward_model import RewardModel, open_reward_model
    from evolve_envs.stack.vector import make_vec

register_envs()

_LAZY = {
    "make_env": "evolve_envs.stack.factory",
    "make_vec": "evolve_envs.stack.vector",
    "open_reward_model": "evolve_envs.stack.reward_model",
    "RewardModel": "evolve_envs.stack.reward_model",
}

__all__ = ["ENV_IDS", "register_envs", "make_env", "make_vec", "open_reward_model", "RewardModel"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evolve_envs' has no attribute {name!r}")
