"""Tests of evolve_envs.train."""
