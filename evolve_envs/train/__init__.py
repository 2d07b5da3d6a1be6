"""Training on Ray: the shared loop and what every algorithm uses; one folder per algorithm.

* :mod:`evolve_envs.train.algorithm` — the :class:`Algorithm` protocol and its registry (entry
  points of ``evolve_envs.algorithms``); :mod:`evolve_envs.train.loop` runs any of them;
* :mod:`evolve_envs.train.worker` — the Ray rollout workers and the weight registry;
* :mod:`evolve_envs.train.driver` — ``evolve-envs train``: config, Ray, the reward service;
* :mod:`evolve_envs.train.config`, :mod:`~evolve_envs.train.checkpoint`,
  :mod:`~evolve_envs.train.placement`, :mod:`~evolve_envs.train.evaluation`,
  :mod:`~evolve_envs.train.run_log` — the rest of a run;
* :mod:`evolve_envs.train.policies` — the policy interface and its implementations;
* :mod:`evolve_envs.train.distrl` — DistRL (asynchronous, prioritized replay, Retrace, A-RIDE);
* :mod:`evolve_envs.train.grpo` — GRPO (synchronous groups, PPO-clip).
"""
