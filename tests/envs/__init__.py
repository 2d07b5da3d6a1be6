"""Tests against the real LIBERO simulator."""
