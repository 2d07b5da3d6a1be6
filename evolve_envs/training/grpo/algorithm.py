"""The synchronous GRPO baseline as an :class:`~evolve_envs.training.algorithm.Algorithm`: rounds
of grouped episodes (one reset seed per group), group-normalised scores, PPO-clip epochs;
``grpo.overlap`` plays the next round while one trains (docs/DISTRL.md).

Example:
    >>> GRPO.name
    'grpo'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.training.algorithm import TrainContext, UpdateResult, get_from_workers
from evolve_envs.training.common.entropy_floor import next_entropy_coef
from evolve_envs.training.common.finite import FiniteSteps

if TYPE_CHECKING:
    from ray import ObjectRef

    from evolve_envs.training.common.trajectory import Trajectory
    from evolve_envs.training.config import TrainConfig
    from evolve_envs.training.grpo.config import GRPOConfig

__all__ = ["GRPO", "grpo_batch", "grpo_settings", "round_groups"]


def round_groups(cfg: TrainConfig) -> int:
    """Groups per round: ``grpo.groups_per_round``, or else enough whole groups for every env of
    the workers to play ``grpo.episodes_per_env`` episodes (rounded up).

    Example:
        >>> from evolve_envs.training.config import TrainConfig
        >>> cfg = TrainConfig(algo="grpo", workers={"num_workers": 3, "num_envs": 4},
        ...                   grpo={"group_size": 8})
        >>> round_groups(cfg)                   # 12 envs: 2 groups of 8 (16 episodes)
        2
    """
    g, w = grpo_settings(cfg), cfg.workers
    if g.groups_per_round is not None:
        return int(g.groups_per_round)
    envs = w.num_workers * w.num_envs * g.episodes_per_env
    return max(1, -(-envs // g.group_size))


def grpo_settings(cfg: TrainConfig) -> GRPOConfig:
    """The config's ``grpo:`` block; a ConfigError when its algorithm left it out."""
    if cfg.grpo is None:
        raise ConfigError(f"algo: {cfg.algo} runs GRPO, but its config holds no grpo:")
    return cfg.grpo


def grpo_batch(trajectories: list[Trajectory], group_size: int) -> dict[str, np.ndarray]:
    """One round's episodes (in group order) as PPO inputs: ``inputs``, ``actions``, ``old_logp``,
    ``advantages`` (each step its episode's group-normalised score) and ``scores``."""
    from evolve_envs.training.grpo.advantages import grpo_advantages

    lengths = [len(t) for t in trajectories]
    rewards = np.zeros((len(trajectories), max(lengths)), dtype=np.float64)
    dones = np.zeros_like(rewards, dtype=bool)
    for b, t in enumerate(trajectories):
        rewards[b, : len(t)] = t.rewards
        dones[b, len(t) - 1] = True  # the episode ended there (terminated or truncated)
    res = grpo_advantages(rewards, dones, group_size, layout="batch_major")
    adv = np.concatenate(
        [
            np.full(n, a, dtype=np.float32)
            for n, a in zip(lengths, res.group_advantages, strict=True)
        ]
    )
    keys = list(trajectories[0].obs)
    inputs = {k: np.concatenate([t.obs[k][:-1] for t in trajectories]) for k in keys}
    return {
        "inputs": inputs,
        "actions": np.concatenate([t.actions for t in trajectories]).astype(np.float32),
        "old_logp": np.concatenate([t.behaviour_logp for t in trajectories]).astype(np.float32),
        "advantages": adv,
        "scores": np.asarray(res.scores, dtype=np.float64),
    }


class GRPO:
    """Synchronous group-relative policy optimisation with PPO-clip; counters ``updates``,
    ``version``, ``rounds``, ``episodes``, ``env_steps_in``."""

    name = "grpo"

    def setup(self, ctx: TrainContext) -> None:
        import torch

        self.ctx = ctx
        self.cfg = ctx.cfg
        self.settings = grpo_settings(ctx.cfg)
        self.policy = ctx.policy
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.settings.lr)
        self._counters = {
            "updates": 0,
            "version": 0,
            "rounds": 0,
            "episodes": 0,
            "env_steps_in": 0,
            "overlapped_rounds": 0,
            "stale_episodes": 0,
            "max_lag": 0,
        }
        self.next_round: tuple[list[ObjectRef], list[int]] | None = None  # grpo.overlap's round k+1
        self.rng = np.random.default_rng([ctx.cfg.run.seed, 0])
        self.last_stats: dict[str, float] = {}
        self.finite = FiniteSteps(who="GRPO's learner")
        from evolve_envs.training.common.validators import default_validator

        self.action_space = ctx.spaces["action_space"]
        self.validator = default_validator(self.action_space)
        self.entropy_coef = float(self.settings.entropy_coef)

    def start(self) -> None:
        pass

    def collect(self) -> list[Trajectory]:
        """One round: every worker plays whole episodes from its share of the round's group
        seeds with the current weights; waits for all of them (the barrier). With
        ``grpo.overlap`` the round started before the last update is waited for and the next one
        starts at once, to be played while this one trains."""
        if not self.settings.overlap:
            return self._gather(self._launch())
        pending = self.next_round if self.next_round is not None else self._launch()
        trajectories = self._gather(pending)
        self.next_round = self._launch()
        return trajectories

    def _gather(self, launched: tuple[list[ObjectRef], list[int]]) -> list[Trajectory]:
        calls, owners = launched
        return [t for chunk in get_from_workers(calls, owners) for t in chunk]

    def _launch(self) -> tuple[list[ObjectRef], list[int]]:
        """Start one round's calls with the current weights; returns (calls, owners)."""
        import ray

        from evolve_envs.training.grpo.groups import group_seeds

        g, w = self.settings, self.cfg.workers
        seeds = group_seeds(round_groups(self.cfg) * g.group_size, g.group_size, self.rng)
        sd = {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}
        weights = ray.put(sd)
        calls, owners = [], []
        for c, start in enumerate(range(0, len(seeds), w.num_envs)):
            owner = c % len(self.ctx.workers)
            chunk = seeds[start : start + w.num_envs]
            worker = self.ctx.workers[owner]
            calls.append(worker.collect_episodes.remote(chunk, [weights], self.version))
            owners.append(owner)
        return calls, owners

    @property
    def version(self) -> int:
        return self._counters["version"]

    def update(self, trajectories: list[Trajectory], budget_fraction: float) -> UpdateResult:
        """``epochs`` passes of PPO-clip over the round's steps, then the next version."""
        import torch

        from evolve_envs.training.grpo.loss import ppo_clip_loss

        if not trajectories:
            return UpdateResult()
        g = self.settings
        batch = grpo_batch(trajectories, g.group_size)
        self.policy.eval()  # as the workers act (dropout off): the ratio is 1 before a step
        n_steps = len(batch["actions"])
        done = samples = 0
        for _ in range(g.epochs):
            order = self.rng.permutation(n_steps)
            for start in range(0, n_steps, g.minibatch_steps):
                idx = order[start : start + g.minibatch_steps]
                inputs = self.policy.to_inputs({k: v[idx] for k, v in batch["inputs"].items()})
                out = ppo_clip_loss(
                    self.policy,
                    inputs,
                    torch.as_tensor(batch["actions"][idx]),
                    torch.as_tensor(batch["old_logp"][idx]),
                    torch.as_tensor(batch["advantages"][idx]),
                    clip=g.clip,
                    entropy_coef=self.entropy_coef,
                    invalid_coef=g.invalid_coef,
                    action_space=self.action_space,
                    validator=self.validator,
                )
                self.optimizer.zero_grad(set_to_none=True)
                out.loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), g.max_grad_norm)
                if not self.finite.ok(out.loss.detach(), norm):  # skip it: weights untouched
                    self.optimizer.zero_grad(set_to_none=True)
                    continue
                self.optimizer.step()
                done += 1
                samples += len(idx)
                self.last_stats = {"loss": float(out.loss.detach())}
                self.last_stats.update({k: float(v) for k, v in dict(out.stats).items()})
                self.last_stats["entropy_coef_now"] = self.entropy_coef
                self.entropy_coef = next_entropy_coef(
                    self.entropy_coef,
                    base=g.entropy_coef,
                    target=g.entropy_target,
                    entropy=self.last_stats["entropy"],
                    rate=g.entropy_adapt_rate,
                )
        c = self._counters
        lags = [self.version - int(t.policy_version) for t in trajectories]
        c["overlapped_rounds"] += int(self.next_round is not None)
        c["stale_episodes"] += sum(lag > 0 for lag in lags)
        c["max_lag"] = max(c["max_lag"], *lags)
        c["updates"] += done
        c["version"] += 1
        c["rounds"] += 1
        c["episodes"] += len(trajectories)
        c["env_steps_in"] += n_steps
        return UpdateResult(updates=done, samples=samples, stats=dict(self.last_stats))

    def counters(self) -> dict[str, int]:
        return {**self._counters, "skipped_updates": self.finite.skipped}

    def metrics(self) -> dict[str, float]:
        c = self._counters
        return {
            "rounds": c["rounds"],
            "env_steps_in": c["env_steps_in"],
            "skipped_updates": self.finite.skipped,
            **self.last_stats,
        }

    def running_calls(self) -> list[ObjectRef]:
        return []  # every call is waited for inside collect()

    def state_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": self.counters(),
            "rng": self.rng.bit_generator.state,
            "entropy_coef": self.entropy_coef,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the config's rate, not the saved one
            group["lr"] = float(self.settings.lr)
        counters = {k: int(v) for k, v in state["counters"].items()}
        self.finite.skipped = counters.pop("skipped_updates", 0)
        self._counters.update(counters)
        self.entropy_coef = float(state.get("entropy_coef", self.settings.entropy_coef))
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        else:  # checkpoints written before the RNG was saved
            self.rng = np.random.default_rng([self.cfg.run.seed, self._counters["rounds"]])

    def stop(self) -> None:
        pass
