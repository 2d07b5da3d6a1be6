"""The base environments ``gym.make`` builds, before any reward wrapper."""
