"""Reward model backends, looked up by name without importing heavy libraries.

`make_backend("mock", latency_ms=5)` builds a backend; only the chosen backend's module is
imported (the `vlm` and `vlac` backends pull in torch/transformers, `mock` does not).

Example:
    >>> backend = make_backend("mock", rule="intensity")
    >>> backend.name
    'mock'
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BACKENDS", "UnknownBackendError", "make_backend", "backend_class"]

BACKENDS: dict[str, str] = {
    "mock": "evolve_envs.reward.service.backends.mock:MockBackend",
    "vlm": "evolve_envs.reward.service.backends.vlm:VLMBackend",
    "vlac": "evolve_envs.reward.service.backends.vlac:VLACBackend",
    "openai": "evolve_envs.reward.service.backends.openai_compat:OpenAICompatBackend",
}


class UnknownBackendError(ValueError):
    """No backend of that name exists."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown backend {name!r}; known backends: {sorted(BACKENDS)}")
        self.backend = name


def backend_class(name: str) -> type:
    """The backend class registered as `name` (imports its module)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UnknownBackendError(name) from None
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def make_backend(name: str, **kwargs: Any) -> Any:
    """Build the backend registered as `name` with `kwargs` (its constructor arguments)."""
    cls = backend_class(name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad kwargs for backend {name!r}: {exc}") from exc
