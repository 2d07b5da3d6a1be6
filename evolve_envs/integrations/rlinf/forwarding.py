"""What RLinf reads from the env it built (``is_start``, ``seed``, ``cfg``, ``flush_video``, ...),
forwarded by a wrapper to the env it wraps; anything else through ``get_wrapper_attr``.

>>> class Inner:
...     seed, auto_reset, offload = 7, True, "here"
>>> class Outer(ForwardsToEnv):
...     def __init__(self, env): self.env = env
>>> outer = Outer(Inner())
>>> outer.seed, outer.auto_reset, outer.get_wrapper_attr("offload")
(7, True, 'here')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

__all__ = ["ForwardsToEnv", "RLinfEnv"]


class RLinfEnv(Protocol):
    """What RLinf's vectorised envs have (its LIBERO env, and a wrapper around it)."""

    is_start: bool

    def reset(self, *args: object, **kwargs: object) -> tuple[Mapping[str, object], dict]: ...

    def chunk_step(self, chunk_actions: object) -> tuple[list, object, object, object, list]: ...

    def update_reset_state_ids(self, *args: object, **kwargs: object) -> object: ...


def _forwarded(name: str) -> property:
    """A read-only attribute that reads ``name`` from the wrapped env."""

    def get(self: ForwardsToEnv) -> object:
        return getattr(self.env, name)

    return property(get, doc=f"The wrapped env's ``{name}``.")


class ForwardsToEnv:
    """A wrapper's forwarding of the attributes RLinf reads to ``self.env``."""

    env: RLinfEnv

    seed = _forwarded("seed")
    cfg = _forwarded("cfg")
    metadata = _forwarded("metadata")
    task_descriptions = _forwarded("task_descriptions")
    reset_state_ids = _forwarded("reset_state_ids")
    group_size = _forwarded("group_size")
    capture_image = _forwarded("capture_image")

    def get_wrapper_attr(self, name: str) -> object:
        """``name`` from this wrapper, else from the env stack below it."""
        if hasattr(self, name):
            return getattr(self, name)
        inner = getattr(self.env, "get_wrapper_attr", None)
        try:
            return inner(name) if callable(inner) else getattr(self.env, name)
        except AttributeError as exc:
            raise AttributeError(
                f"{type(self).__name__} and the env it wraps have no attribute {name!r}"
            ) from exc

    @property
    def unwrapped(self) -> object:
        return getattr(self.env, "unwrapped", self.env)

    @property
    def is_start(self) -> bool:
        return bool(self.env.is_start)

    @is_start.setter
    def is_start(self, value: bool) -> None:
        self.env.is_start = value

    def update_reset_state_ids(self, *args: object, **kwargs: object) -> object:
        return self.env.update_reset_state_ids(*args, **kwargs)

    def flush_video(self, *args: object, **kwargs: object) -> object:
        fn = getattr(self.env, "flush_video", None)
        return fn(*args, **kwargs) if callable(fn) else None

    @property
    def auto_reset(self) -> bool:
        return bool(getattr(self.env, "auto_reset", False))

    @property
    def ignore_terminations(self) -> bool:
        return bool(getattr(self.env, "ignore_terminations", False))
