"""evolve_envs/train/grpo."""
