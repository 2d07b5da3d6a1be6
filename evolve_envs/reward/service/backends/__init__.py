"""Reward model backends by name, through the entry-point group ``evolve_envs.reward_backends``
(only the chosen backend's module is imported); presets are names with some arguments fixed.

Example:
    >>> make_backend("mock", rule="intensity").name
    'mock'
    >>> "mock" in BACKENDS and "roboreward" in BACKENDS
    True
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evolve_envs.reward.service.backends.base import Backend

__all__ = [
    "BACKENDS",
    "BUILTIN_BACKENDS",
    "PRESETS",
    "ENTRY_POINT_GROUP",
    "UnknownBackendError",
    "make_backend",
    "backend_class",
    "config_hash",
]

log = logging.getLogger("evolve_envs.reward.service.backends")

#: The entry-point group every backend (built-in or third-party) is registered in.
ENTRY_POINT_GROUP = "evolve_envs.reward_backends"

_PKG = "evolve_envs.reward.service.backends"

#: The built-in backends, as declared in setup.cfg (used when the installed metadata is stale).
BUILTIN_BACKENDS: dict[str, str] = {
    "mock": f"{_PKG}.mock:MockBackend",
    "vlm": f"{_PKG}.vlm:VLMBackend",
    "vlac": f"{_PKG}.vlac:VLACBackend",
    "openai": f"{_PKG}.openai_compat:OpenAICompatBackend",
    "robometer_remote": f"{_PKG}.robometer_remote:RobometerRemoteBackend",
    "fitted": f"{_PKG}.fitted:FittedProgressBackend",
}


#: Backends that are another backend with arguments fixed: name -> (the backend, the arguments
#: it fixes, defaults it changes). The published judges' own prompts carry their system prompt.
PRESETS: dict[str, tuple[str, dict[str, object], dict[str, object]]] = {
    "roboreward": ("openai", {"preset": "roboreward"}, {"system_prompt": None}),
    "robodopamine": ("openai", {"preset": "robodopamine"}, {"system_prompt": None}),
    "topreward": ("openai", {"preset": "topreward"}, {"system_prompt": None}),
}


class _Registry(Mapping[str, str]):
    """Backend name -> ``module:Class``, read from the entry points on first use."""

    def __init__(self) -> None:
        self._table: dict[str, str] | None = None

    def _load(self) -> dict[str, str]:
        if self._table is None:
            table: dict[str, str] = {}
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in table and table[ep.name] != ep.value:
                    log.warning(
                        "backend %r is declared twice (%s and %s); keeping the first",
                        ep.name,
                        table[ep.name],
                        ep.value,
                    )
                    continue
                table[ep.name] = ep.value
            for name, target in BUILTIN_BACKENDS.items():
                table.setdefault(name, target)
            for name, (base, _, _) in PRESETS.items():
                if base in table:
                    table.setdefault(name, table[base])
            self._table = table
        return self._table

    def refresh(self) -> None:
        """Read the entry points again (after installing a plugin in a running process)."""
        self._table = None

    def __getitem__(self, name: str) -> str:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"BACKENDS({self._load()!r})"


#: Every known backend: name -> ``module:Class`` (built-ins and installed plugins).
BACKENDS = _Registry()


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


def config_hash(name: str, kwargs: Mapping[str, object]) -> str:
    """A short, stable hash of a backend's name and arguments, secrets (``api_key``, ``token``)
    left out."""
    public = {k: v for k, v in kwargs.items() if "key" not in k.lower() and "token" not in k}
    text = json.dumps([name, public], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_backend(name: str, **kwargs: object) -> Backend:
    """Build the backend registered as `name` with `kwargs` (its constructor arguments); a preset
    (``PRESETS``) is its backend with the preset's arguments, named after the preset."""
    cls = backend_class(name)
    args = dict(kwargs)
    if name in PRESETS and BACKENDS[name] == BACKENDS[PRESETS[name][0]]:
        _, fixed, defaults = PRESETS[name]
        for key, value in fixed.items():
            if args.setdefault(key, value) != value:
                raise ValueError(f"the {name} backend's {key} is {value!r}, got {args[key]!r}")
        args = {**defaults, **args}
    try:
        backend = cls(**args)
    except TypeError as exc:
        raise ValueError(f"bad kwargs for backend {name!r}: {exc}") from exc
    if name in PRESETS:
        backend.name = name  # what /capabilities and the identity headers report
    try:
        backend.config_hash = config_hash(name, kwargs)
    except AttributeError:  # a backend with __slots__ or a read-only attribute: no hash
        pass
    return backend
