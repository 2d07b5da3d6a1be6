"""Gymnasium registration of the LIBERO suites.

Importing :mod:`evolve_envs` registers one id per suite. ``gym.make`` keyword arguments go to
:func:`evolve_envs.stack.factory.make_env` (LiberoEnv options, ``reward_model=...``,
``config=...``)::

    import gymnasium as gym
    import evolve_envs  # noqa: F401  (registers the ids)

    env = gym.make("evolve_envs/LIBERO-10-v0", task_id=3, reward_model={"enable": False})

The time limit (the suite's max steps, or ``env.max_episode_steps``) is applied *inside* the
wrapper stack so the reward wrappers see the truncation and settle the episode. Set it through
the config -- ``gym.make(id, config={"env": {"max_episode_steps": 300}})`` or
``make_env(..., max_episode_steps=300)`` -- or with Gymnasium's own keyword,
``gym.make(id, max_episode_steps=300)``. Gymnasium consumes that keyword and wraps the env in a
``TimeLimit`` *outside* the stack, where the reward wrappers would never see its truncation; so
the ids' entry point (:func:`~evolve_envs.stack.factory.make_registered`) *replaces* the stack's
limit with it: the limit
inside the stack becomes 300 too, and the outer ``TimeLimit`` (the same 300, counting the same
steps) ends every episode on the very step the inner one does, after the reward wrappers have
settled it. ``max_episode_steps=-1`` keeps the config's limit, as in Gymnasium.
"""

from __future__ import annotations

import gymnasium as gym

ENV_IDS: dict[str, str] = {
    "evolve_envs/LIBERO-10-v0": "libero_10",
    "evolve_envs/LIBERO-Spatial-v0": "libero_spatial",
    "evolve_envs/LIBERO-Object-v0": "libero_object",
    "evolve_envs/LIBERO-Goal-v0": "libero_goal",
    "evolve_envs/LIBERO-90-v0": "libero_90",
}


#: Synthetic tasks: id -> the base env class. ``gym.make`` builds them through ``make_env``
#: like the LIBERO ids, so they take the same ``reward_model=`` and ``config=`` keywords.
SYNTHETIC_IDS: dict[str, str] = {
    "evolve_envs/ReachPlace-v0": "evolve_envs.envs.synthetic:ReachPlaceEnv"
}


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
