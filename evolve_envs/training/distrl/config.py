"""DistRL's block of a training config, ``distrl:`` (read under ``algo: distrl`` only).

>>> DistRLConfig(batch_size=16).capacity, DistRLConfig().barrier
(256, False)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DistRLConfig"]

_FROZEN = ConfigDict(extra="forbid", validate_default=True, frozen=True)


class DistRLConfig(BaseModel):
    """The DistRL learner's learning rule: prioritized replay (DPER), Retrace(λ), A-RIDE, Adam,
    and the barrier that makes the system synchronous."""

    model_config = _FROZEN

    batch_size: int = Field(default=8, ge=1, description="trajectories per update")
    lr: float = Field(default=3e-4, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    gamma: float = Field(default=0.99, ge=0, le=1)
    lam: float = Field(default=0.95, ge=0, le=1)
    rho_bar: float = Field(default=1.0, gt=0)
    entropy_coef: float = Field(default=1e-3, ge=0)
    value_coef: float = Field(default=0.5, ge=0)
    invalid_coef: float = Field(default=0.1, ge=0)
    normalize_advantages: bool = Field(
        default=False, description="scale the batch's advantages to zero mean, unit std"
    )
    priority_weights: tuple[float, float, float] = (1.0, 0.1, 0.01)
    capacity: int = Field(default=256, ge=1, description="replay capacity in trajectories")
    alpha: float = Field(default=0.6, ge=0, description="priority exponent; 0 = uniform")
    beta: float = Field(default=0.4, ge=0, le=1, description="initial IS exponent, annealed to 1")
    beta_anneal_updates: int | None = Field(
        default=None, ge=1, description="updates over which β reaches 1 (None: over the run)"
    )
    min_buffer: int = Field(default=8, ge=1, description="trajectories before the first update")
    refresh_every: int = Field(default=50, ge=1, description="updates between full refreshes")
    publish_every: int = Field(default=1, ge=1, description="updates between weight broadcasts")
    max_sample_ratio: float | None = Field(
        default=8.0, gt=0, description="most trajectories sampled per trajectory taken in"
    )
    max_staleness: int | None = Field(
        default=None,
        ge=0,
        description="policy versions a stored trajectory may lag the learner at sampling time; "
        "older ones are retired from the replay (None: no limit)",
    )
    clip: float | None = Field(
        default=0.2, gt=0, description="trust region: PPO ratio clip on π/μ (None: A-RIDE as is)"
    )
    normalize_values: bool = Field(
        default=True, description="value loss on targets divided by a running return scale"
    )
    normalize_priorities: bool = Field(
        default=True,
        description="DPER terms divided by running scales and ρ clipped at rho_bar in the "
        "priority, so the TD error leads",
    )
    entropy_target: float | None = Field(
        default=None,
        description="entropy floor: the entropy coefficient grows while the policy's entropy "
        "is below it and shrinks back to entropy_coef above it (None: fixed coefficient)",
    )
    entropy_adapt_rate: float = Field(
        default=0.05, gt=0, description="log-step of the entropy coefficient per update"
    )
    scale_momentum: float = Field(
        default=0.99, ge=0, lt=1, description="EMA momentum of the value and priority scales"
    )
    barrier: bool = Field(
        default=False,
        description="synchronous barrier: the workers stop stepping while the learner trains "
        "and go on with the new weights (False: asynchronous, nobody waits)",
    )
