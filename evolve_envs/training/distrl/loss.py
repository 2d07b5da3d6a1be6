"""DistRL's A-RIDE loss (Retrace(λ) values, truncated importance weights, the invalid-action
penalty, an optional PPO clip and value scale) and the DPER priorities of trajectories; the
formulas are in docs/DISTRL.md and :func:`aride_loss` shows a call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch.distributions import Independent, Normal

from evolve_envs.training.common.loss_output import LOG_RATIO_CLAMP, LossOutput, policy_device
from evolve_envs.training.common.trajectory import Trajectory, stack_obs
from evolve_envs.training.common.validators import (
    ActionValidator,
    gaussian_mass_outside,
    out_of_bounds_or_nonfinite,
)
from evolve_envs.training.distrl.replay import PRIORITY_EPS
from evolve_envs.training.distrl.retrace import retrace_targets, td_errors
from evolve_envs.training.policies.base import Policy

__all__ = [
    "DEFAULT_PRIORITY_WEIGHTS",
    "LossOutput",
    "aride_loss",
    "trajectory_priorities",
]

DEFAULT_PRIORITY_WEIGHTS: tuple[float, float, float] = (1.0, 0.1, 0.01)
"""``(w1, w2, w3)`` for TD error, importance ratio and entropy in the DPER priority."""

_DUAL_CLIP = 3.0


@dataclass
class _Forward:
    """One forward pass over the stacked ``T_i + 1`` rows of every trajectory."""

    logp: torch.Tensor  # [N_act] log pi(a_t|s_t)
    entropy: torch.Tensor  # [N_act]
    values: torch.Tensor  # [N_act] V(s_t)
    values_np: list[np.ndarray]  # per trajectory [T_i + 1], detached
    logp_np: list[np.ndarray]  # per trajectory [T_i], detached
    act_rows: torch.Tensor  # [N_act] indices of acting rows among all rows
    dist: torch.distributions.Distribution  # over all rows


def _forward(policy: Policy, trajs: Sequence[Trajectory]) -> _Forward:
    if not trajs:
        raise ValueError("no trajectories in the batch")
    device = policy_device(policy)
    inputs = policy.to_inputs(stack_obs(trajs, include_last=True))
    dist, values_all = policy(inputs)
    a_dim = trajs[0].action_dim
    rows: list[np.ndarray] = []
    actions_all: list[np.ndarray] = []
    offset = 0
    for tr in trajs:
        t = len(tr)
        if tr.action_dim != a_dim:
            raise ValueError(
                f"trajectories disagree on the action size ({tr.action_dim} vs {a_dim})"
            )
        rows.append(np.arange(offset, offset + t))
        # the bootstrap row gets a dummy action so one log_prob call covers every row
        actions_all.append(np.concatenate([tr.actions, tr.actions[-1:]], axis=0))
        offset += t + 1
    act_rows = torch.as_tensor(np.concatenate(rows), device=device)
    actions = torch.as_tensor(np.concatenate(actions_all), dtype=torch.float32, device=device)
    logp_all = dist.log_prob(actions)
    entropy_all = dist.entropy()
    if logp_all.shape != values_all.shape or logp_all.ndim != 1:
        raise ValueError(
            f"policy must return log_prob [B] and value [B]; got {tuple(logp_all.shape)} and "
            f"{tuple(values_all.shape)} (wrap per-dimension distributions in Independent)"
        )
    v_np = values_all.detach().cpu().numpy().astype(np.float64)
    lp_np = logp_all.detach().cpu().numpy().astype(np.float64)
    values_np, logp_np = [], []
    offset = 0
    for tr in trajs:
        t = len(tr)
        values_np.append(v_np[offset : offset + t + 1])
        logp_np.append(lp_np[offset : offset + t])
        offset += t + 1
    return _Forward(
        logp=logp_all[act_rows],
        entropy=entropy_all[act_rows],
        values=values_all[act_rows],
        values_np=values_np,
        logp_np=logp_np,
        act_rows=act_rows,
        dist=dist,
    )


def _ratios(logp_new: np.ndarray, behaviour_logp: np.ndarray) -> np.ndarray:
    log_ratio = np.clip(logp_new - behaviour_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return np.exp(log_ratio)


def _priority(
    td: np.ndarray,
    rho: np.ndarray,
    logp_new: np.ndarray,
    weights: Sequence[float],
    scales: Sequence[float] | None = None,
    rho_clip: float | None = None,
) -> float:
    w1, w2, w3 = weights
    s_td, s_h = (1.0, 1.0) if scales is None else (max(scales[0], 1e-8), max(scales[1], 1e-8))
    if rho_clip is not None:
        rho = np.minimum(rho, rho_clip)
    p = (
        w1 * float(np.mean(np.abs(td))) / s_td
        + w2 * float(np.mean(rho))
        - w3 * float(np.mean(logp_new)) / s_h
    )
    return max(p, PRIORITY_EPS) if np.isfinite(p) else PRIORITY_EPS


def _check_weights(priority_weights: Sequence[float]) -> tuple[float, float, float]:
    w = tuple(float(x) for x in priority_weights)
    if len(w) != 3:
        raise ValueError(f"priority_weights must be (w1, w2, w3), got {priority_weights!r}")
    return w  # type: ignore[return-value]


def _invalid_terms(
    fwd: _Forward,
    actions: torch.Tensor,
    action_space: spaces.Box,
    validator: ActionValidator,
    step_weights: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(indicator [N_act] for metrics, differentiable surrogate scalar)."""
    indicator = validator(actions, action_space).to(fwd.logp.dtype).detach()
    base = fwd.dist.base_dist if isinstance(fwd.dist, Independent) else fwd.dist
    if validator is out_of_bounds_or_nonfinite and isinstance(base, Normal):
        surrogate = gaussian_mass_outside(fwd.dist, action_space)[fwd.act_rows].mean()
    else:
        surrogate = (step_weights * indicator * fwd.logp).mean()
    return indicator, surrogate


def aride_loss(
    policy: Policy,
    batch: Sequence[Trajectory],
    is_weights: np.ndarray | torch.Tensor | Sequence[float] | None = None,
    *,
    gamma: float = 0.99,
    lam: float = 0.95,
    rho_bar: float = 1.0,
    entropy_coef: float = 0.0,
    invalid_coef: float = 0.0,
    value_coef: float = 0.5,
    action_space: spaces.Box | None = None,
    validator: ActionValidator = out_of_bounds_or_nonfinite,
    priority_weights: Sequence[float] = DEFAULT_PRIORITY_WEIGHTS,
    normalize_advantages: bool = False,
    clip: float | None = None,
    value_scale: float = 1.0,
    priority_scales: Sequence[float] | None = None,
    priority_rho_clip: float | None = None,
) -> LossOutput:
    """A-RIDE policy loss plus Retrace value loss on a batch of trajectories, and a fresh priority
    per trajectory. ``is_weights`` are the replay's importance weights; ``normalize_advantages``
    scales the policy term's advantages to unit spread (progress rewards are small);
    ``action_space`` is needed for the invalid-action penalty.

    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from evolve_envs.training.policies.base import CNNGaussianPolicy
    >>> from evolve_envs.training.common.trajectory import Trajectory
    >>> pol = CNNGaussianPolicy(action_dim=1, state_dim=2, image_key=None)
    >>> obs = pol.encode_obs({"state": np.zeros((5, 2), np.float32)})
    >>> a, logp = pol.act({k: v[:4] for k, v in obs.items()})
    >>> tr = Trajectory(obs, a, logp, np.ones(4, np.float32), np.zeros(4, bool), policy_version=0)
    >>> out = aride_loss(pol, [tr], action_space=spaces.Box(-1, 1, (1,)), invalid_coef=0.1)
    >>> out.loss.backward(); out.priorities.shape
    (1,)
    """
    trajs = list(batch)
    weights3 = _check_weights(priority_weights)
    if rho_bar <= 0:
        raise ValueError(f"rho_bar must be > 0, got {rho_bar}")
    if clip is not None and clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if not value_scale > 0:
        raise ValueError(f"value_scale must be > 0, got {value_scale}")
    if invalid_coef and action_space is None:
        raise ValueError("aride_loss: invalid_coef > 0 needs action_space")
    n = len(trajs)
    if is_weights is None:
        w_traj = np.ones(n)
    elif isinstance(is_weights, torch.Tensor):
        w_traj = is_weights.detach().cpu().numpy().astype(np.float64).reshape(-1)
    else:
        w_traj = np.asarray(is_weights, dtype=np.float64)
    if w_traj.shape != (n,):
        raise ValueError(f"aride_loss: {n} trajectories but is_weights of shape {w_traj.shape}")
    fwd = _forward(policy, trajs)
    device = fwd.logp.device

    targets, advantages, rhos, step_w, tds = [], [], [], [], []
    priorities = np.empty(n, dtype=np.float64)
    for i, tr in enumerate(trajs):
        t = len(tr)
        v = fwd.values_np[i]
        rho = _ratios(fwd.logp_np[i], tr.behaviour_logp.astype(np.float64))
        rew = tr.rewards.astype(np.float64)
        ret = retrace_targets(rew, v[:t], v[t], rho, tr.dones, gamma, lam)
        next_ret = np.append(ret[1:], v[t])
        next_ret[tr.dones] = 0.0
        adv = rew + gamma * next_ret - v[:t]
        td = td_errors(rew, v[:t], v[t], tr.dones, gamma)
        priorities[i] = _priority(
            td, rho, fwd.logp_np[i], weights3, priority_scales, priority_rho_clip
        )
        targets.append(ret)
        advantages.append(adv)
        rhos.append(rho)
        tds.append(td)
        step_w.append(np.full(t, w_traj[i]))

    def _t(parts: list[np.ndarray]) -> torch.Tensor:
        return torch.as_tensor(np.concatenate(parts), dtype=fwd.logp.dtype, device=device)

    target_t, adv_t, rho_t, w_t = _t(targets), _t(advantages), _t(rhos), _t(step_w)
    if normalize_advantages and adv_t.numel() > 1:
        adv_t = (adv_t - adv_t.mean()) / (adv_t.std() + 1e-8)
    rho_clipped = torch.clamp(rho_t, max=rho_bar)
    behaviour_t = _t([tr.behaviour_logp.astype(np.float64) for tr in trajs])
    log_ratio = (fwd.logp - behaviour_t).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if clip is None:
        policy_loss = -(w_t * rho_clipped * adv_t * fwd.logp).mean()
        clip_frac = float("nan")
    else:
        ratio = log_ratio.exp()
        surr = torch.minimum(ratio * adv_t, ratio.clamp(1.0 - clip, 1.0 + clip) * adv_t)
        surr = torch.where(adv_t < 0, torch.maximum(surr, _DUAL_CLIP * adv_t), surr)
        policy_loss = -(w_t * surr).mean()
        clip_frac = float(((ratio.detach() - 1.0).abs() > clip).float().mean())
    entropy = fwd.entropy.mean()
    value_loss = 0.5 * (w_t * ((fwd.values - target_t) / value_scale) ** 2).mean()
    loss = policy_loss - entropy_coef * entropy + value_coef * value_loss

    invalid_rate = float("nan")
    p_invalid = float("nan")
    if action_space is not None:
        actions = torch.as_tensor(
            np.concatenate([tr.actions for tr in trajs]), dtype=torch.float32, device=device
        )
        indicator, surrogate = _invalid_terms(
            fwd, actions, action_space, validator, w_t * rho_clipped
        )
        invalid_rate = float(indicator.mean())
        p_invalid = float(surrogate.detach())
        if invalid_coef:
            loss = loss + invalid_coef * surrogate

    all_td = np.concatenate(tds)
    all_rho = np.concatenate(rhos)
    all_targets = np.concatenate(targets)
    with torch.no_grad():
        lr_d = log_ratio.detach()
        approx_kl = float(((lr_d.exp() - 1.0) - lr_d).mean())
    stats = {
        "loss": float(loss.detach()),
        "policy_loss": float(policy_loss.detach()),
        "value_loss": float(value_loss.detach()),
        "entropy": float(entropy.detach()),
        "mean_rho": float(all_rho.mean()),
        "clipped_rho_frac": float(np.mean(all_rho > rho_bar)),
        "invalid_rate": invalid_rate,
        "p_invalid": p_invalid,
        "clip_frac": clip_frac,
        "approx_kl": approx_kl,
        "mean_abs_td": float(np.abs(all_td).mean()),
        "mean_neg_logp": float(-np.concatenate(fwd.logp_np).mean()),
        "target_std": float(all_targets.std()),
        "mean_advantage": float(np.concatenate(advantages).mean()),
        "mean_target": float(all_targets.mean()),
        "steps": float(all_td.size),
    }
    return LossOutput(loss=loss, stats=stats, priorities=priorities)


@torch.no_grad()
def trajectory_priorities(
    policy: Policy,
    trajs: Sequence[Trajectory],
    *,
    gamma: float = 0.99,
    priority_weights: Sequence[float] = DEFAULT_PRIORITY_WEIGHTS,
    chunk: int = 32,
    lam: float | None = None,
    rho_bar: float | None = None,
    priority_scales: Sequence[float] | None = None,
    priority_rho_clip: float | None = None,
) -> np.ndarray:
    """DPER priorities of ``trajs`` under the current policy (no gradient), ``chunk`` at a time.

    The priority uses one-step TD errors and raw ratios, so it does not depend on ``lam`` or
    ``rho_bar``; they are accepted so that one set of keyword arguments serves both this function
    and :func:`aride_loss` (whose priorities are the same numbers).

    Used for the periodic refresh of the whole buffer:
    ``buf.update_priorities(np.arange(len(buf)), trajectory_priorities(pol, buf.items()))``.
    """
    weights3 = _check_weights(priority_weights)
    trajs = list(trajs)
    out = np.empty(len(trajs), dtype=np.float64)
    for start in range(0, len(trajs), max(1, chunk)):
        part = trajs[start : start + chunk]
        fwd = _forward(policy, part)
        for j, tr in enumerate(part):
            t = len(tr)
            v = fwd.values_np[j]
            rho = _ratios(fwd.logp_np[j], tr.behaviour_logp.astype(np.float64))
            td = td_errors(tr.rewards, v[:t], v[t], tr.dones, gamma)
            out[start + j] = _priority(
                td, rho, fwd.logp_np[j], weights3, priority_scales, priority_rho_clip
            )
    return out
