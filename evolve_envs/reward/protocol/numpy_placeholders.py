"""The pickle codec's NumPy stand-ins (`NUMPY_GLOBALS`), their inert placeholders and the final
rebuild into arrays (`build_numpy_values`).

Example:
    >>> NUMPY_GLOBALS[("numpy", "dtype")]("f8", False, True).descr
    '<f8'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NoReturn

from evolve_envs.reward.protocol.pickle_types import (
    ALLOWED_SCALARS,
    ALLOWED_TEXT,
    MAX_DEPTH,
    UnsafePickleError,
    safe_dtype,
)

__all__ = ["BUILDABLE", "NUMPY_GLOBALS", "PLACEHOLDERS", "build_numpy_values"]

_MAX_DTYPE_NAME = 32  # 'U2147483647' is 11 characters; no legitimate dtype name is longer
_MAX_NDIM = 32
_MAX_DIM = 2**62


class _StandIn:
    """What a numpy global resolves to while unpickling: an immutable callable giving a
    placeholder."""

    __slots__ = ("_name", "_call")

    def __init__(self, name: str, call: Callable[..., object]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_call", call)

    def __call__(self, *args: object) -> object:
        return self._call(*args)

    def __setattr__(self, name: str, value: object) -> None:
        raise UnsafePickleError(f"pickle sets the attribute {name!r} of {self._name}")

    def __setstate__(self, state: object) -> None:
        raise UnsafePickleError(f"pickle sets the state of {self._name} (BUILD)")

    def __repr__(self) -> str:
        return f"<stand-in for {self._name}>"


class _DTypePlaceholder:
    """`numpy.dtype(name, align, copy)` while unpickling; its one `BUILD` may change the byte order
    only."""

    __slots__ = ("descr", "_built")

    def __init__(self, descr: str) -> None:
        self.descr = descr
        self._built = False

    def __setstate__(self, state: object) -> None:
        import numpy as np

        if self._built:
            raise UnsafePickleError("pickle sets the state of a numpy dtype twice")
        self._built = True
        base = np.dtype(self.descr)
        if (
            type(state) is not tuple
            or len(state) != 8
            or state[0] != 3
            or state[1] not in ("<", ">", "|", "=")
            or any(type(v) is not int for v in state[5:])
        ):
            raise UnsafePickleError(
                "numpy dtype state must be numpy's own (3, byte order, None, None, None, "
                f"itemsize, alignment, flags); got {_brief(state)}"
            )
        if state[2:5] != (None, None, None):
            raise UnsafePickleError(
                f"numpy dtype state gives {base.str} a subarray, field names or fields; only "
                "plain numeric, bool and str dtypes are accepted"
            )
        elsize, alignment, flags = state[5:]
        # the flags (numpy's flag byte, which numpy versions set differently) are never
        # applied: the dtype is rebuilt from its name and byte order
        if (
            elsize not in (-1, base.itemsize)
            or alignment not in (-1, base.alignment)
            or not 0 <= flags < 256
        ):
            raise UnsafePickleError(
                f"numpy dtype state does not match {base.str} (itemsize {elsize}, alignment "
                f"{alignment}, flags {flags})"
            )
        if state[1] in "<>":
            self.descr = base.newbyteorder(state[1]).str


class _ArrayPlaceholder:
    """`_reconstruct(numpy.ndarray, ...)` while unpickling; one standard `BUILD`, built at the
    end."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: tuple[object, ...] | None = None

    def __setstate__(self, state: object) -> None:
        if self.state is not None:
            raise UnsafePickleError("pickle sets the state of a numpy array twice")
        if (
            type(state) is not tuple
            or len(state) != 5
            or state[0] != 1
            or type(state[3]) is not bool
            or type(state[4]) is not bytes
        ):
            raise UnsafePickleError(
                "numpy array state must be numpy's own (1, shape, dtype, is_fortran, bytes); "
                f"got {_brief(state)}"
            )
        self._set(state[1], state[2], "F" if state[3] else "C", state[4], None)

    def _set(self, shape: object, dtype: object, order: str, raw: bytes, axes: object) -> None:
        if type(dtype) is not _DTypePlaceholder:
            raise UnsafePickleError(f"malformed numpy array dtype {_brief(dtype)}")
        if (
            type(shape) is not tuple
            or len(shape) > _MAX_NDIM
            or any(type(n) is not int or not 0 <= n < _MAX_DIM for n in shape)
        ):
            raise UnsafePickleError(f"malformed numpy array shape {_brief(shape)}")
        if axes is not None and (
            type(axes) is not tuple or sorted(axes) != list(range(len(shape)))
        ):
            raise UnsafePickleError(f"malformed numpy array axis order {_brief(axes)}")
        self.state = (shape, dtype, order, raw, axes)

    def build(self) -> object:
        import numpy as np

        if self.state is None:
            raise UnsafePickleError("pickle holds a numpy array without its data (no BUILD)")
        shape, dtype_spec, order, raw, axes = self.state
        dtype = safe_dtype(np.dtype(dtype_spec.descr))
        count = math.prod(shape)
        if count * dtype.itemsize != len(raw):
            raise UnsafePickleError(
                f"numpy array of shape {shape} and dtype {dtype.str} needs "
                f"{count * dtype.itemsize} bytes, the pickle gives {len(raw)}"
            )
        flat = np.frombuffer(raw, dtype=dtype, count=count)
        if axes is not None:
            return flat.reshape(shape).transpose(axes).copy()
        return flat.reshape(shape, order=order).copy()


class _ScalarPlaceholder:
    """`numpy._core.multiarray.scalar(dtype, data)` while unpickling; `build` makes the scalar."""

    __slots__ = ("dtype", "data")

    def __init__(self, dtype: _DTypePlaceholder, data: bytes) -> None:
        self.dtype = dtype
        self.data = data

    def __setstate__(self, state: object) -> None:
        raise UnsafePickleError("pickle sets the state of a numpy scalar (BUILD)")

    def build(self) -> object:
        import numpy as np

        dtype = safe_dtype(np.dtype(self.dtype.descr))
        if len(self.data) != dtype.itemsize:
            raise UnsafePickleError(
                f"numpy scalar of dtype {dtype.str} needs {dtype.itemsize} bytes, the pickle "
                f"gives {len(self.data)}"
            )
        return np.frombuffer(self.data, dtype=dtype, count=1)[0]


PLACEHOLDERS = (_DTypePlaceholder, _ArrayPlaceholder, _ScalarPlaceholder)


def _brief(value: object, outer: bool = True) -> str:
    """A short description of a value from the wire (its repr only for plain scalars)."""
    if type(value) is tuple:
        inner = ", ".join(_brief(v, False) for v in value[:8]) if outer else "..."
        text = f"({inner}{', ...' if outer and len(value) > 8 else ''})"
    elif type(value) in ALLOWED_SCALARS:
        text = repr(value)
    else:
        text = f"<{type(value).__name__.strip('_')}>"
    return text if len(text) <= 100 else text[:97] + "..."


def _np_dtype(spec: object, align: object = False, copy: object = True) -> _DTypePlaceholder:
    if type(spec) is not str or len(spec) > _MAX_DTYPE_NAME:
        raise UnsafePickleError("numpy dtype must be given by its name")
    if type(align) is not bool or type(copy) is not bool:
        raise UnsafePickleError("malformed numpy dtype arguments")
    import numpy as np

    try:
        dtype = np.dtype(spec)
    except Exception as exc:  # noqa: BLE001 - numpy raises TypeError, ValueError, warnings
        raise UnsafePickleError(f"unknown numpy dtype {spec!r}: {exc}") from None
    return _DTypePlaceholder(safe_dtype(dtype).str)


def _np_ndarray(*args: object) -> NoReturn:
    raise UnsafePickleError("pickle calls numpy.ndarray directly; arrays are rebuilt only")


def _np_reconstruct(cls: object, shape: object, typecode: object) -> _ArrayPlaceholder:
    if cls is not _NDARRAY:
        raise UnsafePickleError("numpy array reconstruction for a type other than ndarray")
    if type(shape) is not tuple or type(typecode) is not bytes:
        raise UnsafePickleError("malformed numpy array reconstruction")
    return _ArrayPlaceholder()


def _np_frombuffer(
    buf: object, dtype: object, shape: object, order: object, axis_order: object = None
) -> _ArrayPlaceholder:
    """Protocol 5's array: `_frombuffer(buffer, dtype, shape, order[, axis_order])`."""
    if type(buf) not in (bytes, bytearray) or order not in ("C", "F", "K"):
        raise UnsafePickleError("malformed numpy array (protocol 5)")
    if (order == "K") != (axis_order is not None):
        raise UnsafePickleError("malformed numpy array axis order (protocol 5)")
    array = _ArrayPlaceholder()
    array._set(shape, dtype, "C" if order == "K" else order, bytes(buf), axis_order)
    return array


def _np_scalar(dtype: object, data: object = None) -> _ScalarPlaceholder:
    if type(dtype) is not _DTypePlaceholder or type(data) is not bytes:
        raise UnsafePickleError("malformed numpy scalar")
    return _ScalarPlaceholder(dtype, data)


_NDARRAY = _StandIn("numpy.ndarray", _np_ndarray)
_DTYPE = _StandIn("numpy.dtype", _np_dtype)
_RECONSTRUCT = _StandIn("numpy._core.multiarray._reconstruct", _np_reconstruct)
_SCALAR = _StandIn("numpy._core.multiarray.scalar", _np_scalar)
_FROMBUFFER = _StandIn("numpy._core.numeric._frombuffer", _np_frombuffer)

# The numpy globals a pickled numpy scalar or array names, mapped to their stand-ins.
NUMPY_GLOBALS: dict[tuple[str, str], _StandIn] = {("numpy", "ndarray"): _NDARRAY}
NUMPY_GLOBALS[("numpy", "dtype")] = _DTYPE
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    NUMPY_GLOBALS[(_module, "_reconstruct")] = _RECONSTRUCT
    NUMPY_GLOBALS[(_module, "scalar")] = _SCALAR
for _module in ("numpy.core.numeric", "numpy._core.numeric"):
    NUMPY_GLOBALS[(_module, "_frombuffer")] = _FROMBUFFER
# What calling a stand-in gives, by the stand-in's id: the placeholders that take a BUILD.
BUILDABLE = {id(_DTYPE): "dtype", id(_RECONSTRUCT): "array"}


def build_numpy_values(obj: object, memo: dict[int, object], depth: int) -> object:
    """`obj` with every placeholder replaced by the numpy value it describes (built once per
    placeholder, so shared references stay shared); lists and dicts are changed in place,
    tuples rebuilt only when they hold a placeholder."""
    kind = type(obj)
    if kind in ALLOWED_SCALARS:
        return obj
    key = id(obj)
    if key in memo:
        return memo[key]
    if kind is _ArrayPlaceholder or kind is _ScalarPlaceholder:
        memo[key] = value = obj.build()
        return value
    if kind is _DTypePlaceholder:
        raise UnsafePickleError(f"pickle holds a numpy dtype object; {ALLOWED_TEXT} only")
    if kind not in (list, tuple, dict):
        return obj  # refused by _check_plain, with its type named
    if depth >= MAX_DEPTH:
        raise UnsafePickleError(f"pickle is nested deeper than {MAX_DEPTH} levels")
    memo[key] = obj  # a cycle back to this container finds it as it is
    if kind is list:
        for i, item in enumerate(obj):
            new = build_numpy_values(item, memo, depth + 1)
            if new is not item:
                obj[i] = new
        return obj
    if kind is dict:
        items = [
            (build_numpy_values(k, memo, depth + 1), build_numpy_values(v, memo, depth + 1))
            for k, v in obj.items()
        ]
        if any(k is not old for (k, _), old in zip(items, obj, strict=True)):
            try:
                rebuilt = dict(items)
            except TypeError as exc:  # a numpy array as a key
                raise UnsafePickleError(f"pickle holds an unhashable dict key: {exc}") from None
            obj.clear()
            obj.update(rebuilt)
        else:
            for k, v in items:
                if obj[k] is not v:
                    obj[k] = v
        return obj
    children = [build_numpy_values(item, memo, depth + 1) for item in obj]
    if any(new is not old for new, old in zip(children, obj, strict=True)):
        memo[key] = rebuilt_tuple = tuple(children)
        return rebuilt_tuple
    return obj
