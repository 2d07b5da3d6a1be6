"""Tests of evolve_envs.integrations.rlinf."""
