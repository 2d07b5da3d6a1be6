"""Which policy a rollout runs: ``"random"``, ``"zero"`` (gripper open), a callable, or the
function a ``"module:function"`` / ``"path/to/file.py:function"`` names.

Example:
    >>> resolve_policy("numpy:zeros_like") is __import__("numpy").zeros_like
    True
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

__all__ = ["BUILTIN_POLICIES", "PolicyFn", "resolve_policy"]

PolicyFn = Callable[[object], object]
"""A policy: one env's observation (a dict of arrays) -> that env's action."""

BUILTIN_POLICIES = ("random", "zero")


def resolve_policy(policy: str | PolicyFn) -> str | PolicyFn:
    """A built-in policy name, or the callable that ``policy`` (``"module:function"``) names."""
    if callable(policy):
        return policy
    if not isinstance(policy, str):
        raise ValueError(f"policy must be a name, 'module:function' or a callable, got {policy!r}")
    if policy in BUILTIN_POLICIES:
        return policy
    module_name, sep, attr = policy.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            "policy must be 'random', 'zero', 'module:function' or 'path/to/file.py:function', "
            f"got {policy!r}"
        )
    module = _policy_module(policy, module_name)
    target: object = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"policy {policy!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"policy {policy!r}: {attr!r} is not callable")
    return target


def _policy_module(policy: str, name: str) -> ModuleType:
    """The module a ``--policy`` names: a file path (``./my_policy.py``), a module importable
    here, or one in the current folder (a console script's ``sys.path`` does not hold it)."""
    if name.endswith(".py") or "/" in name or os.sep in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ValueError(f"policy {policy!r}: no file {str(path)!r}")
        spec = importlib.util.spec_from_file_location(f"_evolve_policy_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - the user's file: its error in one line
            raise ValueError(
                f"policy {policy!r}: {path} raised {type(exc).__name__}: {exc}"
            ) from None
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.split(".")[0]
        here = Path.cwd()
        if exc.name == top and ((here / f"{top}.py").is_file() or (here / top).is_dir()):
            sys.path.insert(0, str(here))
            return _policy_module(policy, name)
        raise ValueError(
            f"policy {policy!r}: cannot import {name!r} ({exc}); give a module on PYTHONPATH or "
            f"in the current folder, or a file path such as ./{top.replace('.', '/')}.py:function"
        ) from None
    except ImportError as exc:
        raise ValueError(f"policy {policy!r}: cannot import {name!r}: {exc}") from None
