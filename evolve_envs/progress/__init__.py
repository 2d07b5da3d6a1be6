"""evolve_envs/progress."""
