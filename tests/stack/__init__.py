"""Tests of the synthetic environments."""
