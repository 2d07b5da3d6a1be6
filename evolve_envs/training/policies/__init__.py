"""Policies the learners train: the interface and its implementations.

* :mod:`~evolve_envs.training.policies.base` — :class:`Policy` and the CPU-sized CNN Gaussian
  policy;
* :mod:`~evolve_envs.training.policies.transformer` — a Hugging Face transformers policy."""
