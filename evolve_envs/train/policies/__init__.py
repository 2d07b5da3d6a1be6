"""Policies the learners train: the interface and its implementations.

* :mod:`~evolve_envs.train.policies.base` — :class:`Policy` and the CPU-sized CNN Gaussian policy;
* :mod:`~evolve_envs.train.policies.transformer` — a Hugging Face transformers policy."""
