"""Distributed RL core: trajectories, the policy interface, prioritized replay, Retrace, A-RIDE."""

from evolve_envs.distrl.policy import CNNGaussianPolicy, Policy, downscale_images
from evolve_envs.distrl.trajectory import Trajectory, stack_obs

__all__ = [
    "CNNGaussianPolicy",
    "Policy",
    "Trajectory",
    "downscale_images",
    "stack_obs",
]
