"""Tests of the RLinf integration."""
