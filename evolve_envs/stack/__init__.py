"""Assembling the env stack from a config: schema and loading, the reward model, one env, many.

* :mod:`evolve_envs.stack.config` — the YAML schema (``env``, ``reward_model``, ``record``) and
  its loading (files, shipped names, ``VLAC_*`` variables, overrides);
* :mod:`evolve_envs.stack.reward_model` — :func:`open_reward_model`, the one way to open a
  reward model (service, pool, client, capability check);
* :mod:`evolve_envs.stack.factory` — :func:`make_env`, the wrapper stack of one env;
* :mod:`evolve_envs.stack.vector` — :func:`make_vec`, several sub-envs sharing one service;
* :mod:`evolve_envs.stack.registration` — the ``gym.make`` ids' entry points.
"""
