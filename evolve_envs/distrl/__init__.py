"""Distributed RL core: trajectories, the policy interface, prioritized replay, Retrace, A-RIDE.

See ``docs/DISTRL.md`` for the algorithms.
"""

from evolve_envs.distrl.losses import (
    DEFAULT_PRIORITY_WEIGHTS,
    LossOutput,
    aride_loss,
    ppo_clip_loss,
    trajectory_priorities,
)
from evolve_envs.distrl.policy import CNNGaussianPolicy, Policy, downscale_images
from evolve_envs.distrl.replay import PRIORITY_EPS, PrioritizedReplay, SumTree
from evolve_envs.distrl.retrace import retrace_targets, td_errors
from evolve_envs.distrl.trajectory import Trajectory, stack_obs
from evolve_envs.distrl.validators import (
    ActionValidator,
    default_validator,
    gaussian_mass_outside,
    out_of_bounds_or_nonfinite,
)

__all__ = [
    "DEFAULT_PRIORITY_WEIGHTS",
    "PRIORITY_EPS",
    "ActionValidator",
    "CNNGaussianPolicy",
    "LossOutput",
    "Policy",
    "PrioritizedReplay",
    "SumTree",
    "Trajectory",
    "aride_loss",
    "default_validator",
    "downscale_images",
    "gaussian_mass_outside",
    "out_of_bounds_or_nonfinite",
    "ppo_clip_loss",
    "retrace_targets",
    "stack_obs",
    "td_errors",
    "trajectory_priorities",
]
