"""Tests of evolve_envs.training."""
