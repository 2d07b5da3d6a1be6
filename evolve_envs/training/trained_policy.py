"""A trained policy from a run folder, acting on the env's own observations.

:func:`load_policy` reads a run's ``best.safetensors`` (the best policy by held-out success) or
its ``policy.safetensors`` (the last checkpoint's), policy files that carry their config and
spaces (:mod:`evolve_envs.training.policy_file`): no env is built and no code in the file runs.
:meth:`TrainedPolicy.act` takes one raw observation, as ``env.reset`` and ``env.step``
return it (with the ``info`` that carries the task text, for a policy that reads it), and
returns one action: the encoding the training workers apply happens inside. ``deterministic``
(the default) acts with the mean action, as the held-out evaluation does.

Example:
    >>> import evolve_envs
    >>> policy = evolve_envs.load_policy("runs/rp")  # doctest: +SKIP
    >>> env = policy.make_env()  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.training.config import TrainConfig

if TYPE_CHECKING:
    import gymnasium as gym

    from evolve_envs.training.policies.base import Policy

__all__ = ["TrainedPolicy", "load_policy", "saved_policy_path"]


def saved_policy_path(run_dir: str | os.PathLike[str], best: bool | None = None) -> Path:
    """The file :func:`load_policy` reads: ``best.safetensors`` (``best=True``),
    ``policy.safetensors`` (``False``), or the first of them there (``None``); a file is itself.

    >>> saved_policy_path("runs/rp", best=False).name
    'policy.safetensors'
    """
    from evolve_envs.training.policy_file import saved_source

    src = Path(run_dir)
    if src.is_file() or src.suffix in (".safetensors", ".pt"):
        return src
    if best is None:
        best = saved_source(src, best=True).is_file()
    return saved_source(src, best=best)


@dataclass(frozen=True)
class TrainedPolicy:
    """A trained policy with the config it was trained with.

    ``policy`` is the torch module (:class:`~evolve_envs.training.policies.base.Policy`), ``config``
    the run's :class:`~evolve_envs.training.config.TrainConfig`, ``path`` the file it came from,
    ``counters`` the training counters saved with it.

    >>> from evolve_envs.training.evaluation import make_eval_env
    >>> from evolve_envs.training.worker_env import policy_from_config
    >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 3},
    ...                   reward_model={"enable": False})
    >>> env = make_eval_env(cfg)
    >>> net = policy_from_config(cfg.policy, env.observation_space, env.action_space)
    >>> untrained = TrainedPolicy(net, cfg, Path("runs/rp/best.safetensors"), {})
    >>> obs, info = env.reset(seed=0)
    >>> untrained.act(obs, info).shape
    (2,)
    >>> env.close()
    """

    policy: Policy
    config: TrainConfig
    path: Path
    counters: Mapping[str, int]

    def act(
        self,
        obs: Mapping[str, object] | np.ndarray,
        info: Mapping[str, object] | None = None,
        *,
        deterministic: bool = True,
    ) -> np.ndarray:
        """One action for one raw env observation (``info``: the step's, for the task text).

        The mean action with ``deterministic``, else one sampled from the policy.
        """
        from evolve_envs.training.worker_env import batch_obs, with_task

        inputs = self.policy.encode_obs(batch_obs([with_task(obs, info or {})]))
        actions, _ = self.policy.act(inputs, deterministic=deterministic)
        return actions[0]

    def make_env(self, *, reward_model: bool = False) -> gym.Env:
        """The env the policy was trained on (its config's stack); without the reward model
        unless ``reward_model`` (success is the env's own flag, as in the held-out evaluation).
        """
        from evolve_envs.training.evaluation import make_eval_env
        from evolve_envs.training.worker_env import make_worker_env

        return make_worker_env(self.config) if reward_model else make_eval_env(self.config)


def load_policy(
    run_dir: str | os.PathLike[str], *, best: bool | None = None, trust: bool = False
) -> TrainedPolicy:
    """The trained policy of a run folder or a policy file (:func:`saved_policy_path`), built
    from the spaces the file carries (no env) and with no code of the file run; an older ``.pt``
    that needs the full unpickler only with ``trust``. See the module's example."""
    from evolve_envs.training.evaluation import make_eval_env, read_saved
    from evolve_envs.training.worker_env import policy_from_config

    src = Path(run_dir)
    if src.is_dir():  # read_saved names what is missing (best: a run without eval)
        saved = read_saved(src, best=saved_policy_path(src, best).stem == "best", trust=trust)
    else:
        saved = read_saved(src, trust=trust)
    obs_space, act_space = saved.observation_space, saved.action_space
    if obs_space is None or act_space is None:  # an older .pt: the env tells the spaces
        env = make_eval_env(saved.cfg)
        try:
            obs_space, act_space = env.observation_space, env.action_space
        finally:
            env.close()
    policy = policy_from_config(saved.cfg.policy, obs_space, act_space)
    policy.load_state_dict(saved.payload["policy"])
    policy.eval()
    counters = {str(k): int(v) for k, v in dict(saved.payload.get("counters") or {}).items()}
    return TrainedPolicy(policy, saved.cfg, saved.path, counters)
