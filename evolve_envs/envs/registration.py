"""The registered ids of the synthetic task and the LIBERO suites (tables only).

>>> import gymnasium as gym
>>> import evolve_envs  # noqa: F401  (registers the ids)
>>> gym.spec("evolve_envs/ReachPlace-v0").max_episode_steps
50
>>> gym.spec("evolve_envs/LIBERO-10-v0").max_episode_steps
520
>>> DEFAULT_CONFIGS["evolve_envs/ReachPlace-v0"]  # its default stack: reward model on
'reach_place'
"""

from __future__ import annotations

from evolve_envs.envs.libero_tasks import MAX_EPISODE_STEPS

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

#: The shipped config ``gym.make(id)`` builds when no ``config=`` is given (an id not listed
#: builds its base env with the registered limit and no reward model).
DEFAULT_CONFIGS: dict[str, str] = {"evolve_envs/ReachPlace-v0": "reach_place"}

#: The registered episode limits of the synthetic ids (``reach_place.yaml`` holds the same).
SYNTHETIC_LIMITS: dict[str, int] = {"evolve_envs/ReachPlace-v0": 50}

#: The registered episode limit of every id: the synthetic tasks', each LIBERO suite's own.
LIMITS: dict[str, int] = {
    **SYNTHETIC_LIMITS,
    **{env_id: MAX_EPISODE_STEPS[suite] for env_id, suite in ENV_IDS.items()},
}
