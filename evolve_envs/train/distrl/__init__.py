"""DistRL: asynchronous actor-learner training with prioritized replay and Retrace(lambda).

* :mod:`~evolve_envs.train.distrl.algorithm` — :class:`DistRL`, the algorithm the loop runs;
* :mod:`~evolve_envs.train.distrl.learner` — the learner's update;
* :mod:`~evolve_envs.train.distrl.replay` — prioritized replay (sum tree);
* :mod:`~evolve_envs.train.distrl.retrace` — Retrace(lambda) targets;
* :mod:`~evolve_envs.train.distrl.loss` — the A-RIDE loss and DPER priorities.

See ``docs/DISTRL.md``.
"""
