"""evolve_envs/cli."""
