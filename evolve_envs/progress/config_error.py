"""ConfigError: a bad key or value of a config; the message starts with the key's path.

>>> from evolve_envs import ConfigError
>>> str(ConfigError("reward_model.call_every: expected int, got 'abc'"))
"reward_model.call_every: expected int, got 'abc'"
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """An invalid configuration, or settings the reward service's backend cannot serve."""
