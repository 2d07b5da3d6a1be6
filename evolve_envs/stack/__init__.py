"""evolve_envs/stack."""
