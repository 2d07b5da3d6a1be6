"""The DistRL learner: replay intake, prioritized sampling, A-RIDE updates, weights and state
(the update and its off-policy controls are described in docs/DISTRL.md).

Example:
    >>> from evolve_envs.training.distrl.config import DistRLConfig
    >>> Learner.beta_at(DistRLConfig(beta=0.4), 0.5)
    0.7
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from evolve_envs.training.common.entropy_floor import next_entropy_coef
from evolve_envs.training.common.finite import FiniteSteps

if TYPE_CHECKING:
    import torch
    from gymnasium import spaces

    from evolve_envs.training.common.trajectory import Trajectory
    from evolve_envs.training.distrl.config import DistRLConfig
    from evolve_envs.training.policies.base import Policy

__all__ = ["Learner"]


class Learner:
    """Prioritized-replay A-RIDE learner over a :class:`~evolve_envs.training.policies.base.Policy`,
    configured by ``distrl.*`` (docs/DISTRL.md)."""

    def __init__(
        self,
        policy: Policy,
        config: DistRLConfig,
        action_space: spaces.Box,
        *,
        seed: int = 0,
    ) -> None:
        import torch

        from evolve_envs.training.common.validators import default_validator
        from evolve_envs.training.distrl.replay import PrioritizedReplay

        self.policy = policy
        self.cfg = config
        self.action_space = action_space
        self.validator = default_validator(action_space)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
        self.replay = PrioritizedReplay(config.capacity, config.alpha, config.beta)
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self.version = 0
        self.trajectories_in = 0
        self.env_steps_in = 0
        self.samples = 0
        self.refreshes = 0
        self.last_stats: dict[str, float] = {}
        # running scales (value targets, |TD|, |-log pi|) and the adaptive entropy coefficient
        self.scales: dict[str, float] = {}
        self.entropy_coef = float(config.entropy_coef)
        self.finite = FiniteSteps()
        self.beta_fraction = 0.0  # the furthest β has annealed: a resumed run never lowers it

    # ------------------------------------------------------------------ schedule

    @staticmethod
    def beta_at(config: DistRLConfig, fraction: float) -> float:
        """β once ``fraction`` of the annealing span is spent: linear from ``config.beta`` to 1."""
        frac = min(1.0, max(0.0, fraction))
        return round(config.beta + (1.0 - config.beta) * frac, 10)

    def _loss_kwargs(self) -> dict[str, object]:
        c = self.cfg
        kwargs: dict[str, object] = {
            "gamma": c.gamma,
            "lam": c.lam,
            "rho_bar": c.rho_bar,
            "priority_weights": tuple(c.priority_weights),
        }
        if c.normalize_priorities:
            kwargs["priority_rho_clip"] = c.rho_bar
            if "td" in self.scales:
                kwargs["priority_scales"] = (self.scales["td"], self.scales["neg_logp"])
        return kwargs

    def _track_scale(self, key: str, value: float, floor: float) -> float:
        """EMA of ``value`` under ``key`` (the first value starts it), floored at ``floor``."""
        if not math.isfinite(value):
            return self.scales.get(key, floor)
        m = self.cfg.scale_momentum
        old = self.scales.get(key)
        new = value if old is None else m * old + (1.0 - m) * value
        self.scales[key] = max(float(new), floor)
        return self.scales[key]

    def sample_lag(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Policy versions between the learner and the data at ``indices`` (now)."""
        items = self.replay.items()
        return np.asarray([self.version - items[i].policy_version for i in indices], np.int64)

    def retire_stale(self) -> int:
        """Retire every live trajectory more than ``max_staleness`` versions behind."""
        limit = self.cfg.max_staleness
        if limit is None or not len(self.replay):
            return 0
        lag = self.sample_lag(np.arange(len(self.replay)))
        stale = np.flatnonzero((lag > limit) & self.replay.is_live(np.arange(len(self.replay))))
        return self.replay.retire(stale) if stale.size else 0

    # ------------------------------------------------------------------ intake

    def priorities(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """DPER priorities of ``trajectories`` under the current policy."""
        from evolve_envs.training.distrl.loss import trajectory_priorities

        return np.asarray(
            trajectory_priorities(self.policy, list(trajectories), **self._loss_kwargs()),
            dtype=np.float64,
        )

    def ingest(self, trajectories: Sequence[Trajectory]) -> list[int]:
        """Add trajectories with priorities from the current policy; returns their indices."""
        if not trajectories:
            return []
        prios = self.priorities(trajectories)
        indices = [self.replay.add(t, float(p)) for t, p in zip(trajectories, prios, strict=True)]
        self.trajectories_in += len(trajectories)
        self.env_steps_in += sum(len(t.rewards) for t in trajectories)
        return indices

    # ------------------------------------------------------------------ updates

    def ready(self) -> bool:
        """Whether the buffer holds enough fresh trajectories for an update (stale ones are
        retired first)."""
        self.retire_stale()
        return self.replay.live >= min(self.cfg.min_buffer, self.cfg.capacity)

    def update(self, run_fraction: float = 0.0) -> dict[str, float]:
        """One prioritized A-RIDE update; ``run_fraction`` (0..1) is the share of the run's budget
        spent, which anneals β unless ``beta_anneal_updates`` is set. Returns its statistics;
        ``{"skipped": 1.0, ...}`` when the loss or gradient was not finite and no step was taken
        (:mod:`evolve_envs.training.common.finite`)."""
        import torch

        from evolve_envs.training.distrl.loss import aride_loss

        c = self.cfg
        span = c.beta_anneal_updates
        frac = self.updates / span if span else run_fraction
        self.beta_fraction = max(self.beta_fraction, min(1.0, frac))
        self.replay.beta = self.beta_at(c, self.beta_fraction)
        self.retire_stale()
        items, indices, is_weights = self.replay.sample(c.batch_size, self.rng)
        lag = self.sample_lag(indices)
        # the workers act in eval mode: dropout (a transformer policy's) off here too, so π/μ
        # is 1 on fresh data and the trust region sees only real policy change
        self.policy.eval()
        out = aride_loss(
            self.policy,
            items,
            torch.as_tensor(np.asarray(is_weights), dtype=torch.float32),
            entropy_coef=self.entropy_coef,
            invalid_coef=c.invalid_coef,
            value_coef=c.value_coef,
            action_space=self.action_space,
            validator=self.validator,
            normalize_advantages=c.normalize_advantages,
            clip=c.clip,
            value_scale=self.scales.get("value", 1.0) if c.normalize_values else 1.0,
            **self._loss_kwargs(),
        )
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
        if not self.finite.ok(out.loss.detach(), grad_norm):  # weights and priorities untouched
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": 1.0, "loss": float(out.loss.detach()), "grad_norm": float(grad_norm)}
        self.optimizer.step()
        self.replay.update_priorities(indices, np.asarray(out.priorities, dtype=np.float64))
        self.updates += 1
        self.samples += len(items)
        if self.updates % c.refresh_every == 0:
            self.refresh()
        stats = {k: float(v) for k, v in dict(out.stats).items()}
        stats["loss"] = float(out.loss.detach())
        stats["grad_norm"] = float(grad_norm)
        stats["beta"] = float(self.replay.beta)
        stats["sample_lag_mean"] = float(lag.mean())
        stats["sample_lag_max"] = float(lag.max())
        stats["entropy_coef_now"] = self.entropy_coef
        if c.normalize_values:
            stats["value_scale"] = self._track_scale("value", stats["target_std"], 1e-3)
        if c.normalize_priorities:
            self._track_scale("td", stats["mean_abs_td"], 1e-6)
            self._track_scale("neg_logp", abs(stats["mean_neg_logp"]), 0.1)
        self.entropy_coef = next_entropy_coef(
            self.entropy_coef,
            base=c.entropy_coef,
            target=c.entropy_target,
            entropy=stats["entropy"],
            rate=c.entropy_adapt_rate,
        )
        self.last_stats = stats
        return stats

    def refresh(self) -> int:
        """Recompute every stored trajectory's priority with the current policy."""
        indices, items = self.replay_items()
        if not items:
            return 0
        prios = np.empty(len(items))
        for start in range(0, len(items), 32):
            prios[start : start + 32] = self.priorities(items[start : start + 32])
        self.replay.update_priorities(indices, prios)
        self.refreshes += 1
        return len(items)

    def replay_items(self) -> tuple[list[int], list[Trajectory]]:
        """(indices, items) of everything live in the replay."""
        items = self.replay.items()
        live = self.replay.is_live(np.arange(len(items)))
        idx = [i for i in range(len(items)) if live[i]]
        return idx, [items[i] for i in idx]

    def priority_spread(self) -> float:
        """max/min of the stored priorities (1 = uniform; NaN when empty)."""
        prios = np.asarray(self.replay.priorities(), dtype=np.float64)
        prios = prios[self.replay.is_live(np.arange(prios.size))]
        if prios.size == 0:
            return math.nan
        lo = float(prios.min())
        return float(prios.max()) / lo if lo > 0 else math.inf

    # ------------------------------------------------------------------ weights / checkpoint

    def publish(self) -> tuple[int, dict[str, torch.Tensor]]:
        """Bump the policy version; return it with a CPU copy of the weights."""
        self.version += 1
        sd = {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}
        return self.version, sd

    def counters(self) -> dict[str, int]:
        """The counters a resumed run continues from."""
        return {
            "updates": self.updates,
            "version": self.version,
            "trajectories_in": self.trajectories_in,
            "env_steps_in": self.env_steps_in,
            "samples": self.samples,
            "refreshes": self.refreshes,
            "skipped_updates": self.finite.skipped,
        }

    def state_dict(self) -> dict[str, object]:
        """Policy, optimizer, counters and replay metadata (not the trajectories)."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": self.counters(),
            "replay": self.replay.state_dict(),
            "rng": self.rng.bit_generator.state,
            "scales": dict(self.scales),
            "entropy_coef": self.entropy_coef,
            "beta_fraction": self.beta_fraction,
            "saved_at": time.time(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the config's rate, not the saved one
            group["lr"] = float(self.cfg.lr)
        for key, value in state["counters"].items():
            if key == "skipped_updates":
                self.finite.skipped = int(value)
            else:
                setattr(self, key, int(value))
        if "replay" in state:  # its counters; the trajectories themselves are gone
            self.replay.load_counters(state["replay"])
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        self.scales = {k: float(v) for k, v in state.get("scales", {}).items()}
        self.entropy_coef = float(state.get("entropy_coef", self.cfg.entropy_coef))
        self.beta_fraction = float(state.get("beta_fraction", 0.0))
