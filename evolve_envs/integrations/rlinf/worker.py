"""RLinf ``EnvWorker`` that installs progress rewards from the ``reward_model`` YAML block.

RLinf builds its envs in ``EnvWorker._setup_env_and_wrappers(env_cls, env_cfg, ...)``. This
subclass hands RLinf a constructor that builds the env and wraps it in
:class:`~evolve_envs.integrations.rlinf.adapter.RLinfProgressReward` when
``env_cfg.reward_model.enable``
is true, then lets RLinf add its own wrappers (video recording, data collection) around it as
usual, so recorded videos show the progress rewards. ``env.train`` and ``env.eval`` are handled
independently (a block under ``env.eval`` is honoured too, but evaluation normally reports the
simulator's success). A ``reward_model`` block that is RLinf's own (its world-model envs' reward
network) is left alone, and a config that also turns on RLinf's reward worker
(``reward.use_reward_model``) is refused (:mod:`evolve_envs.integrations.rlinf.stack`).

Importing this module needs RLinf (``pip install 'evolve-envs[rlinf]'`` or RLinf's own install);
without it the ImportError says so. Use it through
``python -m evolve_envs.integrations.rlinf.launch`` (no changes to RLinf) or in your own launcher::

    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker

    env_group = ProgressEnvWorker.create_group(cfg).launch(
        cluster, name=cfg.env.group_name, placement_strategy=env_placement)
"""

from __future__ import annotations

from typing import Any

from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward
from evolve_envs.integrations.rlinf.quiet_gym import import_gym_quietly
from evolve_envs.integrations.rlinf.stack import check_reward_switches, enabled_block

import_gym_quietly()  # RLinf's envs import gym: no "unmaintained" banner in every worker

try:
    from rlinf.workers.env.env_worker import EnvWorker as _RLinfEnvWorker
except ImportError as exc:  # pragma: no cover - exercised only without RLinf
    raise ImportError(
        "evolve_envs.integrations.rlinf.worker needs the 'rlinf' package (RLinf), which could "
        f"not be imported: {exc}. Install it with `pip install 'evolve-envs[rlinf]'` or follow "
        "RLinf's installation guide."
    ) from exc

__all__ = ["ProgressEnvWorker", "with_progress_reward"]


def with_progress_reward(env_cls: Any, env_cfg: Any, where: str = "env.train") -> Any:
    """A drop-in for RLinf's ``env_cls`` that wraps each built env per ``env_cfg.reward_model``.

    Returns ``env_cls`` itself when the block is absent, disabled or RLinf's own.
    """
    block = enabled_block(env_cfg, where)
    if block is None:
        return env_cls

    def build(*args: Any, **kwargs: Any) -> Any:
        return RLinfProgressReward.from_config(env_cls(*args, **kwargs), block)

    build.__name__ = f"ProgressReward[{getattr(env_cls, '__name__', 'env')}]"
    return build


class ProgressEnvWorker(_RLinfEnvWorker):
    """RLinf's ``EnvWorker`` with progress rewards installed from ``env.*.reward_model``.

    Usage (in an RLinf launcher, with a Ray cluster)::

        ProgressEnvWorker.create_group(cfg).launch(cluster, name=cfg.env.group_name,
                                                   placement_strategy=env_placement)
    """

    def _setup_env_and_wrappers(self, env_cls, env_cfg, num_envs_per_stage: int):  # noqa: ANN001
        check_reward_switches(self.cfg)
        where = "env.eval" if bool(env_cfg.get("is_eval", False)) else "env.train"
        return super()._setup_env_and_wrappers(
            env_cls=with_progress_reward(env_cls, env_cfg, where),
            env_cfg=env_cfg,
            num_envs_per_stage=num_envs_per_stage,
        )

    def check_chunk(self, chunk: int, action_dim: int) -> list[dict[str, Any]]:
        """Reset each train env and step it through one chunk of zero actions (start-up check).

        Returns, per env, the sub-envs' progress, reward-model calls and summed rewards.
        """
        import torch

        results = []
        for env in self.env_list:
            env.is_start = True
            obs, _ = env.reset()
            num_envs = len(obs["task_descriptions"])
            actions = torch.zeros((num_envs, chunk, action_dim))
            _, rewards, _, _, infos_list = env.chunk_step(actions)
            last = infos_list[-1]
            episode = last.get("episode", {})
            results.append(
                {
                    "progress": [float(x) for x in last.get("progress", [])],
                    "reward_model_calls": [int(x) for x in episode.get("reward_model_calls", [])],
                    "rewards": [float(x) for x in rewards.sum(dim=1)],
                }
            )
        return results

    def env_stacks(self) -> list[list[str]]:
        """Class names of each train env's wrapper chain, outermost first (for start-up checks)."""
        stacks = []
        for env in self.env_list:
            names = []
            while env is not None and len(names) < 16:
                names.append(type(env).__name__)
                env = getattr(env, "env", None)
            stacks.append(names)
        return stacks
