"""The registered ids of the synthetic task and the LIBERO suites (tables only).

Importing :mod:`evolve_envs` registers the ids
(:func:`evolve_envs.stack.registration.register_envs`). ``gym.make(id)`` with no arguments builds
what the table in docs/getting-started.md, "What gym.make(id) gives" says; keyword arguments go to
:func:`evolve_envs.stack.factory.make_env` (``config=...``, ``reward_model=...``, env keys)::

    >>> import gymnasium as gym
    >>> import evolve_envs  # noqa: F401  (registers the ids)
    >>> gym.spec("evolve_envs/ReachPlace-v0").max_episode_steps
    50
    >>> gym.spec("evolve_envs/LIBERO-10-v0").max_episode_steps
    520
    >>> DEFAULT_CONFIGS["evolve_envs/ReachPlace-v0"]  # its default stack: reward model on
    'reach_place'

Each id registers its limit (ReachPlace's 50 steps, each LIBERO suite's own), so Gymnasium puts
its ``TimeLimit`` outside the env and ``env.spec.max_episode_steps`` tells the truth. The stack
puts the same limit *inside* the reward wrappers, read from the spec, so they see the truncation
and settle the episode; both count the same steps and end on the same step. A config's
``env.max_episode_steps`` sets the stack's limit (a shorter one ends the episode first; with a
longer one pass ``max_episode_steps=-1`` or the same number to ``gym.make``). Gymnasium keeps
its own ``max_episode_steps=N`` from the entry point and sets only the outer limit with it, whose
truncation the reward wrappers cannot see: change the episode length in the config, e.g.
``gym.make(id, config=["reach_place", {"env": {"max_episode_steps": 300}}],
max_episode_steps=-1)``, or call ``make_env``. ``gym.make_vec(id)`` passes the limit to the
vector entry point (:func:`evolve_envs.stack.vector.make_vec_registered`), which sets it inside
every sub-env.
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
