"""RLinf: the reward model inside RLinf's LIBERO env worker.

* :mod:`~evolve_envs.integrations.rlinf.adapter` — the batch reward wrapper around RLinf's env;
* :mod:`~evolve_envs.integrations.rlinf.worker` — the env worker that installs it;
* :mod:`~evolve_envs.integrations.rlinf.launch` — the launcher that registers the worker;
* :mod:`~evolve_envs.integrations.rlinf.env_check` — a check of the hook points;
* :mod:`~evolve_envs.integrations.rlinf.layout` — RLinf 0.3's and ``main``'s config layouts;
* :mod:`~evolve_envs.integrations.rlinf.frames` — the reward model's frames, upright.

See ``docs/rlinf.md``.
"""
