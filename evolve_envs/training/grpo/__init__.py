"""GRPO: synchronous groups of episodes per scene, group-normalised scores, PPO-clip.

* :mod:`~evolve_envs.training.grpo.algorithm` — :class:`GRPO`, the algorithm the loop runs;
* :mod:`~evolve_envs.training.grpo.advantages` — the group advantages (also RLinf's layout);
* :mod:`~evolve_envs.training.grpo.loss` — the PPO clipped surrogate.
"""
