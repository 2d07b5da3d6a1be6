"""evolve_envs/train/distrl."""
