"""The pickle scorer protocol's restricted codec, used on both sides of the wire: plain data and
inert NumPy values only, held to a `BodyBudget` (docs/PROTOCOLS.md, section 3).

Example:
    >>> safe_pickle_loads(safe_pickle_dumps({"scores": [0.5]}))
    {'scores': [0.5]}
"""

from __future__ import annotations

import io
import pickle
from typing import NoReturn

from evolve_envs.reward.protocol.body_budget import (
    DEFAULT_BODY_BUDGET,
    BodyBudget,
    measure_body,
)
from evolve_envs.reward.protocol.numpy_placeholders import (
    NUMPY_GLOBALS,
    PLACEHOLDERS,
    build_numpy_values,
)
from evolve_envs.reward.protocol.pickle_scan import check_opcodes
from evolve_envs.reward.protocol.pickle_types import (
    ALLOWED_SCALARS,
    ALLOWED_TEXT,
    MAX_DEPTH,
    PlainValue,
    UnsafePickleError,
    safe_dtype,
)

__all__ = ["safe_pickle_loads", "safe_pickle_dumps", "to_plain"]


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global except the numpy stand-ins."""

    def find_class(self, module: str, name: str) -> object:
        stand_in = NUMPY_GLOBALS.get((module, name))
        if stand_in is not None:
            return stand_in
        raise UnsafePickleError(
            f"pickle refers to the global {module}.{name}; only {ALLOWED_TEXT} are accepted"
        )

    def persistent_load(self, pid: object) -> NoReturn:
        raise UnsafePickleError("pickle uses persistent ids, which are not accepted")


def _is_safe_numpy(item: object) -> bool:
    """True for numpy arrays and scalars of an allowed dtype (numpy imported only if loaded)."""
    import sys

    np = sys.modules.get("numpy")
    if np is None or not isinstance(item, np.ndarray | np.generic):
        return False
    if type(item) is not np.ndarray and not isinstance(item, np.generic):
        return False  # ndarray subclasses (np.matrix, masked arrays) are not plain data
    try:
        safe_dtype(item.dtype)
    except UnsafePickleError:
        return False
    return True


def _check_plain(obj: object) -> None:
    """Raise UnsafePickleError unless `obj` holds only the allowed plain types (linear in the
    memo)."""
    seen: set[int] = set()
    stack: list[tuple[object, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in ALLOWED_SCALARS:
            continue
        if kind not in (list, tuple, dict):
            if _is_safe_numpy(item):
                continue
            if kind in PLACEHOLDERS:
                raise UnsafePickleError(
                    "pickle holds a numpy value that refers back to itself; "
                    f"only {ALLOWED_TEXT} are accepted"
                )
            raise UnsafePickleError(
                f"pickle holds a {kind.__name__}"
                + (f" of dtype {item.dtype}" if hasattr(item, "dtype") else "")
                + f"; only {ALLOWED_TEXT} are accepted"
            )
        if id(item) in seen:
            continue
        seen.add(id(item))
        if depth >= MAX_DEPTH:
            raise UnsafePickleError(f"pickle is nested deeper than {MAX_DEPTH} levels")
        if kind is dict:
            for key, value in item.items():
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)


def to_plain(obj: object) -> PlainValue:
    """`obj` with numpy scalars and arrays turned into Python values and (nested) lists."""
    if isinstance(obj, dict):
        return {to_plain(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_plain(v) for v in obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return obj.tolist()
    return obj


def safe_pickle_loads(data: bytes, budget: BodyBudget | None = DEFAULT_BODY_BUDGET) -> PlainValue:
    """Unpickle `data` resolving no global but numpy's stand-ins; only plain data comes back.

    Raises `UnsafePickleError` for any other global, a bad `BUILD` or malformed data, and
    `BodyBudgetError` past `budget` (`None` skips the size checks: trusted data only).

    Example:
        >>> safe_pickle_loads(pickle.dumps({"scores": [1.0, 0.5]}))
        {'scores': [1.0, 0.5]}
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise UnsafePickleError(f"expected bytes, got {type(data).__name__}")
    check_opcodes(bytes(data), budget)
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except RecursionError as exc:
        raise UnsafePickleError("pickle is nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed payload
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from exc
    try:
        obj = build_numpy_values(obj, {}, 0)
    except UnsafePickleError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's own refusals (sizes, shapes)
        raise UnsafePickleError(f"malformed numpy value: {type(exc).__name__}: {exc}") from None
    _check_plain(obj)
    if budget is not None:
        measure_body(obj, budget)
    return obj


def safe_pickle_dumps(obj: object) -> bytes:
    """Pickle plain data (what `safe_pickle_loads` accepts; else `UnsafePickleError`), protocol
    4."""
    _check_plain(obj)
    return pickle.dumps(obj, protocol=4)
