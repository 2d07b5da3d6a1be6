"""Adapters into other training frameworks (RLinf)."""
