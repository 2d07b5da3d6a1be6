"""The pickle scorer protocol's restricted codec (both sides of the wire use it).

`safe_pickle_loads` unpickles only plain data — bytes, str, numbers, bool, None, lists, tuples,
dicts and NumPy scalars/arrays of numeric, bool or str dtype — and refuses any other global
(a class or function a hostile pickle would call) with :class:`UnsafePickleError`. What it
returns is also held to a `BodyBudget` (:mod:`evolve_envs.reward.protocol.body_budget`): shared
references count each time they are reached and cycles are refused, so a small pickle cannot
expand into an unbounded body for whoever walks it next (`BodyBudgetError`).

Nothing live is built from the wire. The names a pickled NumPy value refers to
(`numpy.dtype`, `numpy.ndarray`, `numpy._core.multiarray._reconstruct` and `.scalar`, and
protocol 5's `numpy._core.numeric._frombuffer`) resolve to stand-ins that return inert
placeholders; the only state a placeholder takes (`BUILD`) is
NumPy's standard one (a dtype's byte order; an array's shape, dtype, order and bytes), checked
as it arrives. When the whole pickle is read, each placeholder becomes a fresh array or scalar,
built from a canonical dtype string, a shape and bytes whose length must match exactly
(`np.frombuffer(raw, np.dtype(name)).reshape(shape).copy()`). Before anything is unpickled,
the opcodes are scanned: a `BUILD` whose target is not a dtype or array placeholder (a stand-in,
a list, a scalar) is refused, as are memo indices out of sequence and lengths past the data.

The accepted types and `UnsafePickleError` are in :mod:`evolve_envs.reward.protocol.pickle_types`,
the opcode scan in :mod:`evolve_envs.reward.protocol.pickle_scan`, the stand-ins, placeholders
and the final rebuild in :mod:`evolve_envs.reward.protocol.numpy_placeholders`.

Example:
    >>> safe_pickle_loads(safe_pickle_dumps({"scores": [0.5]}))
    {'scores': [0.5]}
"""

from __future__ import annotations

import io
import pickle
from typing import Any

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
    UnsafePickleError,
    safe_dtype,
)

__all__ = ["safe_pickle_loads", "safe_pickle_dumps", "to_plain"]


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global except the numpy stand-ins.

    A pickled numpy array names `numpy.ndarray`, `numpy.dtype` and
    `numpy._core.multiarray._reconstruct` (or `numpy._core.numeric._frombuffer`); these resolve
    to stand-ins that return inert placeholders (`safe_pickle_loads` turns them into arrays
    once the pickle is read). Any other global (e.g. `os.system`) raises before it is imported.
    """

    def find_class(self, module: str, name: str) -> Any:
        stand_in = NUMPY_GLOBALS.get((module, name))
        if stand_in is not None:
            return stand_in
        raise UnsafePickleError(
            f"pickle refers to the global {module}.{name}; only {ALLOWED_TEXT} are accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("pickle uses persistent ids, which are not accepted")


def _is_safe_numpy(item: Any) -> bool:
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


def _check_plain(obj: Any) -> None:
    """Raise UnsafePickleError unless `obj` holds only the allowed plain types.

    Containers already seen are skipped (by identity), so shared references and cycles that a
    pickle can build with its memo cost linear time.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
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


def to_plain(obj: Any) -> Any:
    """`obj` with numpy scalars and arrays turned into Python values and (nested) lists.

    Example:
        >>> import numpy as np
        >>> to_plain({"scores": np.array([0.5, 1.0], dtype=np.float32), "n": np.int64(2)})
        {'scores': [0.5, 1.0], 'n': 2}
    """
    if isinstance(obj, dict):
        return {to_plain(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_plain(v) for v in obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return obj.tolist()
    return obj


def safe_pickle_loads(data: bytes, budget: BodyBudget | None = DEFAULT_BODY_BUDGET) -> Any:
    """Unpickle `data` resolving no global but numpy's; only plain data types come back.

    Allowed: bytes, str, int, float, bool, None, list, tuple, dict (nested), and numpy scalars
    and arrays of bool, integer, float, complex, str or bytes dtype (no structured, subarray or
    object dtypes). A pickle that names any other class or function (e.g. a crafted `os.system`
    call) raises `UnsafePickleError` before anything is imported or called; so does a `BUILD`
    on anything but a numpy dtype or array placeholder (see `check_opcodes`). Numpy values are
    built only once the pickle is read, from a dtype name, a shape and bytes of exactly the
    right length. Malformed data also raises `UnsafePickleError`. `to_plain` turns numpy
    values into lists. The result must fit `budget` (values, bytes and depth counted through
    shared references; no cycles), else `BodyBudgetError` naming the top-level key; so must
    the pickle's opcodes, checked before anything is unpickled; `budget=None` skips both size
    checks (only for trusted data), not the others.

    Example:
        >>> import numpy as np
        >>> safe_pickle_loads(pickle.dumps({"scores": [1.0, 0.5]}))
        {'scores': [1.0, 0.5]}
        >>> safe_pickle_loads(pickle.dumps({"scores": np.arange(3, dtype=">i4")}))["scores"]
        array([0, 1, 2], dtype='>i4')
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


def safe_pickle_dumps(obj: Any) -> bytes:
    """Pickle plain data (the same types `safe_pickle_loads` accepts), protocol 4.

    Raises `UnsafePickleError` if `obj` holds anything else (e.g. an object array), so the other
    side can always read what this side writes.
    """
    _check_plain(obj)
    return pickle.dumps(obj, protocol=4)
