"""Gymnasium registration of the ids in :mod:`evolve_envs.envs.registration`.

The tables name the ids; this module gives them their entry points, which build the wrapper
stack (:func:`~evolve_envs.stack.factory.make_registered`,
:func:`~evolve_envs.stack.vector.make_vec`), so the registration sits in the layer of what it
names. Importing :mod:`evolve_envs` calls
:func:`register_envs`.

Example:
    >>> import gymnasium as gym
    >>> register_envs()
    >>> gym.spec("evolve_envs/ReachPlace-v0").entry_point
    'evolve_envs.stack.factory:make_registered'
"""

from __future__ import annotations

import gymnasium as gym

from evolve_envs.envs.registration import ENV_IDS, SYNTHETIC_IDS

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS` and :data:`SYNTHETIC_IDS` (idempotent).

    Each id's entry point is :func:`evolve_envs.stack.factory.make_registered` (``make_env``): a
    LIBERO id passes its suite, a synthetic id passes itself as ``env.id``, which ``make_env``
    resolves to the base env class. The vector entry point is
    :func:`evolve_envs.stack.vector.make_vec`
    (one embedded service shared by all sub-envs). ``gym.make(id, max_episode_steps=N)`` sets
    the limit inside the stack too (:func:`~evolve_envs.stack.factory.make_registered`).
    """
    for env_id in SYNTHETIC_IDS:
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="evolve_envs.stack.factory:make_registered",
                vector_entry_point="evolve_envs.stack.vector:make_vec",
                kwargs={"id": env_id},
                max_episode_steps=None,
            )
    for env_id, suite in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="evolve_envs.stack.factory:make_registered",
            vector_entry_point="evolve_envs.stack.vector:make_vec",
            kwargs={"suite": suite},
            max_episode_steps=None,
        )
