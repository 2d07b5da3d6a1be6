"""Tests of the rollout command, the configs and the docs that name them."""
