"""Tests of the Gymnasium wrappers against real reward servers on loopback."""
