"""The project's tests, one folder per area (run with `python -m pytest`)."""
