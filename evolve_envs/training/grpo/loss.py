"""PPO's clipped surrogate over a flat batch of steps: the loss GRPO optimises.

GRPO scores whole episodes, normalises the scores within each group of episodes that share a
scene (:mod:`evolve_envs.training.grpo.advantages`) and gives every step of an episode its
episode's advantage; this loss then takes ``epochs`` clipped steps on them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from gymnasium import spaces
from torch.distributions import Independent, Normal

from evolve_envs.training.common.loss_output import (
    LOG_RATIO_CLAMP,
    LossOutput,
    as_float_tensor,
    policy_device,
)
from evolve_envs.training.common.validators import (
    ActionValidator,
    gaussian_mass_outside,
    out_of_bounds_or_nonfinite,
)
from evolve_envs.training.policies.base import Policy

__all__ = ["ppo_clip_loss"]


def ppo_clip_loss(
    policy: Policy,
    inputs: Mapping[str, np.ndarray | torch.Tensor],
    actions: np.ndarray | torch.Tensor,
    old_logp: np.ndarray | torch.Tensor,
    advantages: np.ndarray | torch.Tensor,
    *,
    clip: float = 0.2,
    entropy_coef: float = 0.0,
    mask: np.ndarray | torch.Tensor | None = None,
    invalid_coef: float = 0.0,
    action_space: spaces.Box | None = None,
    validator: ActionValidator = out_of_bounds_or_nonfinite,
) -> LossOutput:
    """PPO clipped surrogate over a flat batch of steps, minus the entropy bonus, plus the
    invalid-action penalty; ``mask`` (bool ``[B]``) selects the steps that count. No priorities.

    Example:
        >>> import numpy as np
        >>> from evolve_envs.training.policies.base import CNNGaussianPolicy
        >>> pol = CNNGaussianPolicy(action_dim=2, state_dim=3, image_key=None)
        >>> inp = pol.encode_obs({"state": np.random.default_rng(0).normal(size=(8, 3))})
        >>> a, lp = pol.act(inp)
        >>> out = ppo_clip_loss(pol, inp, a, lp, np.linspace(-1, 1, 8))
        >>> out.loss.backward(); round(out.stats["mean_ratio"], 4)
        1.0
    """
    device = policy_device(policy)
    if clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if invalid_coef and action_space is None:
        raise ValueError("ppo_clip_loss: invalid_coef > 0 needs action_space")
    tensor_inputs = {
        k: (
            v.to(device)
            if isinstance(v, torch.Tensor)
            else torch.as_tensor(np.asarray(v), device=device)
        )
        for k, v in inputs.items()
    }
    dist, _ = policy(tensor_inputs)
    act = as_float_tensor(actions, device)
    logp = dist.log_prob(act)
    old = as_float_tensor(old_logp, device)
    adv = as_float_tensor(advantages, device)
    if not (logp.shape == old.shape == adv.shape) or logp.ndim != 1:
        raise ValueError(
            f"ppo_clip_loss: log_prob {tuple(logp.shape)}, old_logp {tuple(old.shape)} and "
            f"advantages {tuple(adv.shape)} must all be [B]"
        )
    if mask is None:
        m = torch.ones_like(logp)
    else:
        m = torch.as_tensor(mask, device=device).to(logp.dtype)
    denom = m.sum().clamp(min=1.0)
    log_ratio = (logp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    surr = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
    policy_loss = -(surr * m).sum() / denom
    entropy = (dist.entropy() * m).sum() / denom
    loss = policy_loss - entropy_coef * entropy
    invalid_rate = float("nan")
    if action_space is not None:
        indicator = validator(act, action_space).to(logp.dtype).detach()
        invalid_rate = float((indicator * m).sum() / denom)
        if invalid_coef:
            base = dist.base_dist if isinstance(dist, Independent) else dist
            if validator is out_of_bounds_or_nonfinite and isinstance(base, Normal):
                p_inv = gaussian_mass_outside(dist, action_space)
            else:
                p_inv = ratio.detach() * indicator * logp
            loss = loss + invalid_coef * (p_inv * m).sum() / denom
    with torch.no_grad():
        approx_kl = (((ratio - 1.0) - log_ratio) * m).sum() / denom
        clip_frac = (((ratio - 1.0).abs() > clip).to(logp.dtype) * m).sum() / denom
        mean_ratio = (ratio * m).sum() / denom
    stats = {
        "loss": float(loss.detach()),
        "policy_loss": float(policy_loss.detach()),
        "entropy": float(entropy.detach()),
        "approx_kl": float(approx_kl),
        "clip_frac": float(clip_frac),
        "mean_ratio": float(mean_ratio),
        "invalid_rate": invalid_rate,
    }
    return LossOutput(loss=loss, stats=stats)
