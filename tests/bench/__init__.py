"""Smoke tests of the benchmark scripts."""
