"""GRPO's block of a training config, ``grpo:`` (read under ``algo: grpo`` only).

>>> GRPOConfig().group_size, GRPOConfig(lr=1e-3).lr
(4, 0.001)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GRPOConfig"]

_FROZEN = ConfigDict(extra="forbid", validate_default=True, frozen=True)


class GRPOConfig(BaseModel):
    """The synchronous GRPO baseline: groups of ``group_size`` episodes from one reset seed."""

    model_config = _FROZEN

    group_size: int = Field(default=4, ge=2)
    groups_per_round: int | None = Field(
        default=None,
        ge=1,
        description="None: enough groups for episodes_per_env episodes per env of the workers "
        "(rounded up to whole groups)",
    )
    episodes_per_env: int = Field(
        default=1,
        ge=1,
        description="with groups_per_round None, episodes each env plays per round: the round's "
        "batch scales with the workers",
    )
    clip: float = Field(default=0.2, gt=0)
    epochs: int = Field(default=2, ge=1)
    minibatch_steps: int = Field(default=256, ge=1)
    lr: float = Field(default=3e-4, gt=0)
    entropy_coef: float = Field(default=1e-3, ge=0)
    entropy_target: float | None = Field(
        default=None,
        description="entropy floor, as distrl.entropy_target: the coefficient grows while "
        "the policy's entropy is below it (None: fixed coefficient)",
    )
    entropy_adapt_rate: float = Field(
        default=0.05, gt=0, description="log-step of the entropy coefficient per optimizer step"
    )
    invalid_coef: float = Field(
        default=0.0,
        ge=0,
        description="penalty on the probability of an action outside the action space, as "
        "distrl.invalid_coef (0: off)",
    )
    max_grad_norm: float = Field(default=1.0, gt=0)
    overlap: bool = Field(
        default=False,
        description="collect round k+1 while round k trains: one version stale, PPO's ratio "
        "taken against the behaviour log-probs it was collected with (False: a barrier)",
    )
