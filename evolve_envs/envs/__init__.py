"""evolve_envs/envs."""
