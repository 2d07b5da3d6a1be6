"""Tests of reward trust: recording, calibration, done rules and the hacking alarm."""
