"""Tests of the reward service: real servers in child processes on loopback."""
