"""The algorithms' blocks of a training config: ``learner`` (DistRL) and ``grpo`` (GRPO).

>>> LearnerConfig(batch_size=16).capacity, GrpoConfig().group_size
(256, 4)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GrpoConfig", "LearnerConfig"]

_STRICT = ConfigDict(extra="forbid", validate_default=True)


class LearnerConfig(BaseModel):
    """The DistRL learner: prioritized replay (DPER), Retrace(λ), A-RIDE, Adam."""

    model_config = _STRICT

    batch_size: int = Field(default=8, ge=1, description="trajectories per update")
    num_gpus: float = Field(
        default=0.0,
        ge=0,
        description="GPUs for the learner: > 0 puts the policy "
        "and optimizer on CUDA when one is visible",
    )
    placement: Literal["driver", "cluster"] = Field(
        default="driver",
        description="'driver': the learner runs in the process that started the run; "
        "'cluster': it runs as a Ray task placed by num_cpus, num_gpus and resources",
    )
    num_cpus: float = Field(
        default=1.0, ge=0, description="Ray CPUs the learner holds (placement: cluster)"
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources the learner asks for (placement: cluster), "
        "e.g. {learner: 1}",
    )
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
    queue_size: int = Field(default=64, ge=1, description="trajectory queue bound")
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


class GrpoConfig(BaseModel):
    """The synchronous GRPO baseline: groups of ``group_size`` episodes from one reset seed."""

    model_config = _STRICT

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
        description="entropy floor, as learner.entropy_target: the coefficient grows while "
        "the policy's entropy is below it (None: fixed coefficient)",
    )
    entropy_adapt_rate: float = Field(
        default=0.05, gt=0, description="log-step of the entropy coefficient per optimizer step"
    )
    invalid_coef: float = Field(
        default=0.0,
        ge=0,
        description="penalty on the probability of an action outside the action space, as "
        "learner.invalid_coef (0: off)",
    )
    max_grad_norm: float = Field(default=1.0, gt=0)
    overlap: bool = Field(
        default=False,
        description="collect round k+1 while round k trains: one version stale, PPO's ratio "
        "taken against the behaviour log-probs it was collected with (False: a barrier)",
    )
