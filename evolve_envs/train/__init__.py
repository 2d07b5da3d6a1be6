"""Training on Ray: the shared loop and what every algorithm uses; one folder per algorithm.

* :mod:`evolve_envs.train.algorithm` — the :class:`Algorithm` protocol and its registry (entry
  points of ``evolve_envs.algorithms``); :mod:`evolve_envs.train.loop` runs any of them;
* :mod:`evolve_envs.train.worker` — the Ray rollout workers and the weight registry;
* :mod:`evolve_envs.train.driver` — ``evolve-envs train``: config, Ray, the reward service;
* :mod:`evolve_envs.train.config`, :mod:`~evolve_envs.train.checkpoint`,
  :mod:`~evolve_envs.train.runtime.placement`, :mod:`~evolve_envs.train.evaluation`,
  :mod:`~evolve_envs.train.run_log` — the rest of a run;
* :mod:`evolve_envs.train.policies` — the policy interface and its implementations;
* :mod:`evolve_envs.train.distrl` — DistRL (asynchronous, prioritized replay, Retrace, A-RIDE);
* :mod:`evolve_envs.train.grpo` — GRPO (synchronous groups, PPO-clip);
* :mod:`evolve_envs.train.api` and :mod:`evolve_envs.train.trained_policy` — the Python entry
  points, :func:`evolve_envs.train` and :func:`evolve_envs.load_policy`.

The package itself is callable: ``evolve_envs.train(config, ...)`` is
:func:`evolve_envs.train.api.train` (the name is the package's and the function's at once, so
``import evolve_envs.train.driver`` and ``evolve_envs.train(...)`` both work, in either order).

>>> import evolve_envs
>>> callable(evolve_envs.train), evolve_envs.train.__name__
(True, 'evolve_envs.train')
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evolve_envs.train.api import ConfigSource
    from evolve_envs.train.driver import TrainResult


class _CallablePackage(types.ModuleType):
    """This package's module type: calling it runs :func:`evolve_envs.train.api.train`."""

    def __call__(self, config: ConfigSource | None = None, /, **kwargs: Any) -> TrainResult:
        from evolve_envs.train.api import train

        return train(config, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
