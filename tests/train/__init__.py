"""Tests of the distributed RL trainer (DistRL)."""
