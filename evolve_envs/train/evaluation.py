"""Held-out evaluation: a policy's env success on fixed scenes that training never sees.

Training draws reset seeds below ``2**31 - 1`` (workers and ``rl.grpo.group_seeds``), so
:data:`HELD_OUT_BASE` ``+ k`` are scenes no training episode starts from. :func:`evaluate_policy`
plays one episode per seed with the policy's mean action (deterministic), on the plain env
(no reward model: success is the env's ``info["is_success"]`` flag, never a reward), and returns
the success rate with its per-episode outcomes. ``deterministic=False`` samples the actions
instead (as the workers do), from a torch RNG seeded with ``sample_seed`` and kept apart from the
global one: a policy can succeed more with its noise than with its mean action (one that stalls
where its mean is near zero), and comparing the two says so.

Example:
    >>> from evolve_envs.train.config import TrainConfig
    >>> from evolve_envs.train.worker_env import policy_from_config
    >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 5},
    ...                   reward_model={"enable": False})
    >>> env = make_eval_env(cfg)
    >>> pol = policy_from_config(cfg.policy, env.observation_space, env.action_space)
    >>> res = evaluate_policy(cfg, pol, held_out_seeds(4))
    >>> res.episodes, 0.0 <= res.success_rate <= 1.0
    (4, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HELD_OUT_BASE", "EvalResult", "evaluate_policy", "held_out_seeds", "make_eval_env"]

#: First held-out reset seed: above every seed training draws (``< 2**31 - 1``).
HELD_OUT_BASE = 2**31


def held_out_seeds(n: int, offset: int = 0) -> list[int]:
    """``n`` fixed held-out reset seeds.

    >>> held_out_seeds(2)
    [2147483648, 2147483649]
    """
    return [HELD_OUT_BASE + offset + k for k in range(n)]


@dataclass
class EvalResult:
    """Outcome of :func:`evaluate_policy`."""

    success: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    @property
    def episodes(self) -> int:
        return len(self.success)

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.success)) if self.success else float("nan")


def make_eval_env(cfg: Any, worker_index: int = 0) -> Any:
    """The config's env without the reward model (success comes from the env)."""
    from evolve_envs.train.config import TrainConfig
    from evolve_envs.train.worker_env import make_worker_env

    plain = TrainConfig.model_validate(
        {**cfg.model_dump(), "reward_model": {"enable": False}, "record": None}
    )  # fmt: skip
    return make_worker_env(plain, worker_index)


def evaluate_policy(
    cfg: Any,
    policy: Any,
    seeds: list[int],
    num_envs: int = 10,
    *,
    deterministic: bool = True,
    sample_seed: int = 0,
) -> EvalResult:
    """Play one episode per seed (``num_envs`` at a time) and record success: the mean action,
    or with ``deterministic=False`` sampled actions (reproducible for a given ``sample_seed``)."""
    import torch

    if not deterministic:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sample_seed)
            return _play(cfg, policy, seeds, num_envs, deterministic=False)
    return _play(cfg, policy, seeds, num_envs, deterministic=True)


def _play(cfg: Any, policy: Any, seeds: list[int], num_envs: int, *, deterministic: bool
          ) -> EvalResult:  # fmt: skip
    import torch

    from evolve_envs.train.worker_env import batch_obs, with_task

    envs = [make_eval_env(cfg) for _ in range(min(num_envs, len(seeds)))]
    result = EvalResult()
    policy.eval()
    try:
        for start in range(0, len(seeds), len(envs)):
            chunk = seeds[start : start + len(envs)]
            obs = [with_task(*env.reset(seed=int(s))) for env, s in zip(envs, chunk, strict=False)]
            live = list(range(len(chunk)))
            success = [False] * len(chunk)
            lengths = [0] * len(chunk)
            while live:
                inputs = policy.encode_obs(batch_obs([obs[i] for i in live]))
                with torch.no_grad():
                    actions, _ = policy.act(inputs, deterministic=deterministic)
                still = []
                for j, i in enumerate(live):
                    o, _, terminated, truncated, info = envs[i].step(actions[j])
                    lengths[i] += 1
                    if terminated or truncated:
                        success[i] = bool(info.get("is_success", False))
                    else:
                        obs[i] = with_task(o, info)
                        still.append(i)
                live = still
            result.success.extend(success)
            result.lengths.extend(lengths)
    finally:
        for env in envs:
            env.close()
    return result
