"""evolve_envs/recording."""
