"""The reward logic, without Gymnasium: from reward-model answers to rewards and ``done``.

* :mod:`evolve_envs.progress.tracker` — one episode's progress contract (schedule, calls,
  milestones, settlement); the Gymnasium wrappers and the RLinf adapter both drive it;
* :mod:`evolve_envs.progress.deferred`, :mod:`evolve_envs.progress.settled_episode` — ``calls:
  deferred``: answers settled at their own steps, episodes handed on once settled;
* :mod:`evolve_envs.progress.arithmetic` — the pure progress arithmetic (critic accumulation,
  check schedule, thresholds);
* :mod:`evolve_envs.progress.done_rules` — when the model's ``done`` ends an episode;
* :mod:`evolve_envs.progress.frame_store` — the bounded per-episode frame store;
* :mod:`evolve_envs.progress.episode_summary`, :mod:`evolve_envs.progress.task_text` — the
  episode summary every path reports and the task text it is judged on;
* :mod:`evolve_envs.progress.tracker_config` — the reward keys' schema and :class:`ConfigError`.
"""
