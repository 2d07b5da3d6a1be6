"""Tests of the reward clients against real reward servers on loopback."""
