"""Gymnasium registration of the LIBERO suites.

Importing :mod:`evolve_envs` registers one id per suite. ``gym.make`` keyword arguments go to
:func:`evolve_envs.factory.make_env` (LiberoEnv options, ``reward_model=...``, ``config=...``)::

    import gymnasium as gym
    import evolve_envs  # noqa: F401  (registers the ids)

    env = gym.make("evolve_envs/LIBERO-10-v0", task_id=3, reward_model={"enable": False})

The time limit (the suite's max steps) is applied *inside* the wrapper stack so the reward
wrappers see the truncation and settle the episode. Change it through the config —
``gym.make(id, config={"env": {"max_episode_steps": 300}})`` or
``make_env(..., max_episode_steps=300)`` — not with ``gym.make(id, max_episode_steps=300)``:
Gymnasium consumes that keyword itself and adds a second ``TimeLimit`` *outside* the reward
wrappers, which then never see the truncation.
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


#: Synthetic tasks (base envs, no reward stack: build them with ``make_env`` and ``env.id``).
SYNTHETIC_IDS: dict[str, str] = {"evolve_envs/ReachPlace-v0": "evolve_envs.synthetic:ReachPlaceEnv"}


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS` and :data:`SYNTHETIC_IDS` (idempotent)."""
    for env_id, entry_point in SYNTHETIC_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
    for env_id, suite in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="evolve_envs.factory:make_env",
            kwargs={"suite": suite},
        )
