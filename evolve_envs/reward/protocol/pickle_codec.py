"""The pickle scorer protocol's restricted codec (both sides of the wire use it).

`safe_pickle_loads` unpickles only plain data — bytes, str, numbers, bool, None, lists, tuples,
dicts and NumPy scalars/arrays of numeric, bool or str dtype — and refuses any other global
(a class or function a hostile pickle would call) with :class:`UnsafePickleError`. What it
returns is also held to a `BodyBudget` (:mod:`evolve_envs.reward.protocol.body_budget`): shared
references count each time they are reached and cycles are refused, so a small pickle cannot
expand into an unbounded body for whoever walks it next (`BodyBudgetError`).

Example:
    >>> safe_pickle_loads(safe_pickle_dumps({"scores": [0.5]}))
    {'scores': [0.5]}
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any

from evolve_envs.reward.protocol.body_budget import (
    DEFAULT_BODY_BUDGET,
    BodyBudget,
    BodyBudgetError,
    measure_body,
)

__all__ = ["UnsafePickleError", "safe_pickle_loads", "safe_pickle_dumps", "to_plain"]


class UnsafePickleError(ValueError):
    """A pickle refers to a global (class, function) or holds a type outside the allowed set.

    >>> import os
    >>> try:
    ...     safe_pickle_loads(pickle.dumps(os.getcwd))  # a pickle that names a function
    ... except UnsafePickleError as exc:
    ...     print(str(exc).split(";")[0])
    pickle refers to the global posix.getcwd
    """


_ALLOWED_SCALARS = (bytes, str, int, float, bool, type(None))
_MAX_DEPTH = 64
# numpy dtype kinds a pickle may carry: bool, signed/unsigned int, float, complex, str, bytes.
_NUMPY_KINDS = frozenset("biufcUS")
_ALLOWED_TEXT = (
    "bytes, str, int, float, bool, None, list, tuple, dict and numpy scalars/arrays of "
    "numeric, bool or str dtype"
)


def _safe_dtype(dtype: Any) -> Any:
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind not in _NUMPY_KINDS or dtype.hasobject or dtype.fields is not None:
        raise UnsafePickleError(f"pickle holds a numpy {dtype!r} value; {_ALLOWED_TEXT} only")
    return dtype


class _NDArrayMarker:
    """Stands in for `numpy.ndarray` while unpickling, so it can only be used to rebuild arrays."""


def _np_dtype(spec: Any, align: Any = False, copy: Any = False) -> Any:
    import numpy as np

    if not isinstance(spec, str):
        raise UnsafePickleError("numpy dtype must be given by its name")
    return _safe_dtype(np.dtype(spec))


def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> Any:
    import numpy as np

    if cls is not _NDArrayMarker:
        raise UnsafePickleError("numpy array reconstruction for a type other than ndarray")
    return np.ndarray((0,), dtype=np.uint8)


def _np_scalar(dtype: Any, data: Any = None) -> Any:
    import numpy as np

    dtype = _safe_dtype(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise UnsafePickleError("malformed numpy scalar")
    return np.frombuffer(data, dtype=dtype)[0]


# The numpy globals a pickled numpy scalar or array names, mapped to checked stand-ins.
_NUMPY_GLOBALS: dict[tuple[str, str], Any] = {}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _NUMPY_GLOBALS[(_module, "_reconstruct")] = _np_reconstruct
    _NUMPY_GLOBALS[(_module, "scalar")] = _np_scalar
_NUMPY_GLOBALS[("numpy", "ndarray")] = _NDArrayMarker
_NUMPY_GLOBALS[("numpy", "dtype")] = _np_dtype


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global except checked stand-ins for numpy data.

    A pickled numpy array names `numpy.ndarray`, `numpy.dtype` and
    `numpy._core.multiarray._reconstruct`; these resolve to functions of this module that
    build only arrays and scalars of the allowed dtypes (never object dtype). Any other global
    (e.g. `os.system`) raises before it is imported.
    """

    def find_class(self, module: str, name: str) -> Any:
        stand_in = _NUMPY_GLOBALS.get((module, name))
        if stand_in is not None:
            return stand_in
        raise UnsafePickleError(
            f"pickle refers to the global {module}.{name}; only {_ALLOWED_TEXT} are accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("pickle uses persistent ids, which are not accepted")


_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _check_opcodes(data: bytes, budget: BodyBudget) -> None:
    """Refuse, before unpickling, what would make the unpickler itself allocate out of
    proportion to `data`.

    A memo index is an array index to the C unpickler: `LONG_BINPUT` with index 2^30 in a
    13-byte pickle makes it allocate 16 GiB. A pickler numbers its memo entries 0, 1, 2, ...,
    so an index past the entries stored so far is refused (`UnsafePickleError`). Counted
    lengths that promise more bytes than remain are refused the same way (malformed). The
    opcodes are at most `4 * max_nodes + 1024` (every value needs about one to three), so the
    scan costs at most a fraction of a second (`BodyBudgetError` beyond).
    """
    max_ops = 4 * budget.max_nodes + 1024
    stored = 0
    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(data)):
            if count >= max_ops:
                raise BodyBudgetError(
                    f"pickle has more than {max_ops} opcodes (the body may hold at most "
                    f"{budget.max_nodes} values)",
                    field=None,
                )
            if op.name in _MEMO_PUTS:
                if arg > stored:
                    raise UnsafePickleError(
                        f"pickle stores memo entry {arg} after only {stored} entries"
                    )
                stored = max(stored, arg + 1)
            elif op.name == "MEMOIZE":
                stored += 1
    except (UnsafePickleError, BodyBudgetError):
        raise
    except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and friends
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from None


def _is_safe_numpy(item: Any) -> bool:
    """True for numpy arrays and scalars of an allowed dtype (numpy imported only if loaded)."""
    import sys

    np = sys.modules.get("numpy")
    if np is None or not isinstance(item, np.ndarray | np.generic):
        return False
    if type(item) is not np.ndarray and not isinstance(item, np.generic):
        return False  # ndarray subclasses (np.matrix, masked arrays) are not plain data
    try:
        _safe_dtype(item.dtype)
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
        if kind in _ALLOWED_SCALARS:
            continue
        if kind not in (list, tuple, dict):
            if _is_safe_numpy(item):
                continue
            raise UnsafePickleError(
                f"pickle holds a {kind.__name__}"
                + (f" of dtype {item.dtype}" if hasattr(item, "dtype") else "")
                + f"; only {_ALLOWED_TEXT} are accepted"
            )
        if id(item) in seen:
            continue
        seen.add(id(item))
        if depth >= _MAX_DEPTH:
            raise UnsafePickleError(f"pickle is nested deeper than {_MAX_DEPTH} levels")
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
    and arrays of bool, integer, float, complex, str or bytes dtype (rebuilt through checked
    stand-ins, never object dtype). A pickle that names any other class or function (e.g. a
    crafted `os.system` call) raises `UnsafePickleError` before anything is imported or called.
    Malformed data also raises `UnsafePickleError`. `to_plain` turns numpy values into lists.
    The result must fit `budget` (values, bytes and depth counted through shared references;
    no cycles), else `BodyBudgetError` naming the top-level key; so must the pickle's opcodes,
    checked before anything is unpickled (memo indices in sequence, see `_check_opcodes`);
    `budget=None` skips both checks (only for trusted data).

    Example:
        >>> safe_pickle_loads(pickle.dumps({"scores": [1.0, 0.5]}))
        {'scores': [1.0, 0.5]}
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise UnsafePickleError(f"expected bytes, got {type(data).__name__}")
    if budget is not None:
        _check_opcodes(bytes(data), budget)
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except RecursionError as exc:
        raise UnsafePickleError("pickle is nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed payload
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from exc
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
