"""Training on Ray: the shared loop and what every algorithm uses; one folder per algorithm.

* :mod:`evolve_envs.training.algorithm` — the :class:`Algorithm` protocol and its registry (entry
  points of ``evolve_envs.algorithms``); :mod:`evolve_envs.training.loop` runs any of them;
* :mod:`evolve_envs.training.worker` — the Ray rollout workers and the weight registry;
* :mod:`evolve_envs.training.driver` — ``evolve-envs train``: config, Ray, the reward service;
* :mod:`evolve_envs.training.config`, :mod:`~evolve_envs.training.checkpoint`,
  :mod:`~evolve_envs.training.runtime.placement`, :mod:`~evolve_envs.training.evaluation`,
  :mod:`~evolve_envs.training.run_log` — the rest of a run;
* :mod:`evolve_envs.training.policies` — the policy interface and its implementations;
* :mod:`evolve_envs.training.distrl` — DistRL (asynchronous, prioritized replay, Retrace, A-RIDE);
* :mod:`evolve_envs.training.grpo` — GRPO (synchronous groups, PPO-clip);
* :mod:`evolve_envs.training.api` and :mod:`evolve_envs.training.trained_policy` — the Python entry
  points, :func:`evolve_envs.train` and :func:`evolve_envs.load_policy`.

The function a user calls is :func:`evolve_envs.train` (:func:`evolve_envs.training.api.train`).

>>> import evolve_envs
>>> from evolve_envs.training.api import train
>>> evolve_envs.train is train
True
"""
