"""Gymnasium registration of the ids in :mod:`evolve_envs.envs.registration` (entry points here).

>>> import gymnasium as gym
>>> register_envs()
>>> gym.spec("evolve_envs/ReachPlace-v0").entry_point
'evolve_envs.stack.factory:make_registered'
"""

from __future__ import annotations

import gymnasium as gym

from evolve_envs.envs.registration import ENV_IDS, LIMITS, SYNTHETIC_IDS

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register every id in :data:`~evolve_envs.envs.registration.ENV_IDS` and
    :data:`~evolve_envs.envs.registration.SYNTHETIC_IDS` (idempotent).

    Each id's entry point is :func:`evolve_envs.stack.factory.make_registered` (``make_env``
    with the id's default config), its vector entry point
    :func:`evolve_envs.stack.vector.make_vec_registered` (one embedded service shared by all
    sub-envs), its ``max_episode_steps`` the task's limit.
    """
    for env_id, limit in LIMITS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="evolve_envs.stack.factory:make_registered",
            vector_entry_point="evolve_envs.stack.vector:make_vec_registered",
            kwargs={"id": env_id} if env_id in SYNTHETIC_IDS else {"suite": ENV_IDS[env_id]},
            max_episode_steps=limit,
        )
