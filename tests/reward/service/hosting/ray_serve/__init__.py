"""Tests of the serving back ends (Ray Serve, OpenAI-compatible servers, VLAC)."""
