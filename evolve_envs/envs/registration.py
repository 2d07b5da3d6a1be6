"""The registered ids: one per LIBERO suite, one per synthetic task (tables only).

Importing :mod:`evolve_envs` registers them
(:func:`evolve_envs.stack.registration.register_envs`). ``gym.make`` keyword arguments go to
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
