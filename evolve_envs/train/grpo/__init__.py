"""GRPO: synchronous groups of episodes per scene, group-normalised scores, PPO-clip.

* :mod:`~evolve_envs.train.grpo.algorithm` — :class:`GRPO`, the algorithm the loop runs;
* :mod:`~evolve_envs.train.grpo.advantages` — the group advantages (also RLinf's layout);
* :mod:`~evolve_envs.train.grpo.loss` — the PPO clipped surrogate.
"""
