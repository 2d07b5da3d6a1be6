"""backends package."""
