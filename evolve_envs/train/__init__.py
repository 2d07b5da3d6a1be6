"""evolve_envs/train."""
