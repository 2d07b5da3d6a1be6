"""evolve_envs/train/policies."""
