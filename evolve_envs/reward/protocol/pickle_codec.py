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

Example:
    >>> safe_pickle_loads(safe_pickle_dumps({"scores": [0.5]}))
    {'scores': [0.5]}
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from collections.abc import Callable
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
_MAX_DTYPE_NAME = 32  # 'U2147483647' is 11 characters; no legitimate dtype name is longer
_MAX_NDIM = 32
_MAX_DIM = 2**62


def _safe_dtype(dtype: Any) -> Any:
    import numpy as np

    dtype = np.dtype(dtype)
    if (
        dtype.kind not in _NUMPY_KINDS
        or dtype.hasobject
        or dtype.fields is not None
        or dtype.subdtype is not None
        or dtype.metadata
    ):
        raise UnsafePickleError(f"pickle holds a numpy {dtype!r} value; {_ALLOWED_TEXT} only")
    return dtype


# ------------------------------------------------------------------ stand-ins and placeholders


class _StandIn:
    """What a numpy global resolves to while unpickling: a callable that returns a placeholder.

    Immutable: it has no `__dict__`, refuses attribute assignment and refuses a `BUILD` (which a
    pickle could otherwise use to change it for every later request in the process).
    """

    __slots__ = ("_name", "_call")

    def __init__(self, name: str, call: Callable[..., Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_call", call)

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)

    def __setattr__(self, name: str, value: Any) -> None:
        raise UnsafePickleError(f"pickle sets the attribute {name!r} of {self._name}")

    def __setstate__(self, state: Any) -> None:
        raise UnsafePickleError(f"pickle sets the state of {self._name} (BUILD)")

    def __repr__(self) -> str:
        return f"<stand-in for {self._name}>"


class _DTypePlaceholder:
    """`numpy.dtype(name, align, copy)` while unpickling: a canonical dtype string (`'<f8'`).

    Its one `BUILD` may carry only numpy's standard state for that dtype,
    `(3, byte order, None, None, None, itemsize or -1, alignment or -1, flags)`: it may change
    the byte order, nothing else (no subarray, fields or item size; the flags are not used).
    """

    __slots__ = ("descr", "_built")

    def __init__(self, descr: str) -> None:
        self.descr = descr
        self._built = False

    def __setstate__(self, state: Any) -> None:
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
    """`numpy._core.multiarray._reconstruct(numpy.ndarray, ...)` while unpickling.

    Its one `BUILD` must be numpy's standard array state `(1, shape, dtype, is_fortran, raw)`
    with a dtype placeholder and `raw` bytes (protocol 5's `_frombuffer` gives the same parts
    as arguments); `build` makes the array at the end.
    """

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: tuple[Any, ...] | None = None

    def __setstate__(self, state: Any) -> None:
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

    def _set(self, shape: Any, dtype: Any, order: str, raw: bytes, axes: Any) -> None:
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

    def build(self) -> Any:
        import numpy as np

        if self.state is None:
            raise UnsafePickleError("pickle holds a numpy array without its data (no BUILD)")
        shape, dtype_spec, order, raw, axes = self.state
        dtype = _safe_dtype(np.dtype(dtype_spec.descr))
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

    def __setstate__(self, state: Any) -> None:
        raise UnsafePickleError("pickle sets the state of a numpy scalar (BUILD)")

    def build(self) -> Any:
        import numpy as np

        dtype = _safe_dtype(np.dtype(self.dtype.descr))
        if len(self.data) != dtype.itemsize:
            raise UnsafePickleError(
                f"numpy scalar of dtype {dtype.str} needs {dtype.itemsize} bytes, the pickle "
                f"gives {len(self.data)}"
            )
        return np.frombuffer(self.data, dtype=dtype, count=1)[0]


_PLACEHOLDERS = (_DTypePlaceholder, _ArrayPlaceholder, _ScalarPlaceholder)


def _brief(value: Any, outer: bool = True) -> str:
    """A short description of a value from the wire (its repr only for plain scalars)."""
    if type(value) is tuple:
        inner = ", ".join(_brief(v, False) for v in value[:8]) if outer else "..."
        text = f"({inner}{', ...' if outer and len(value) > 8 else ''})"
    elif type(value) in _ALLOWED_SCALARS:
        text = repr(value)
    else:
        text = f"<{type(value).__name__.strip('_')}>"
    return text if len(text) <= 100 else text[:97] + "..."


def _np_dtype(spec: Any, align: Any = False, copy: Any = True) -> _DTypePlaceholder:
    if type(spec) is not str or len(spec) > _MAX_DTYPE_NAME:
        raise UnsafePickleError("numpy dtype must be given by its name")
    if type(align) is not bool or type(copy) is not bool:
        raise UnsafePickleError("malformed numpy dtype arguments")
    import numpy as np

    try:
        dtype = np.dtype(spec)
    except Exception as exc:  # noqa: BLE001 - numpy raises TypeError, ValueError, warnings
        raise UnsafePickleError(f"unknown numpy dtype {spec!r}: {exc}") from None
    return _DTypePlaceholder(_safe_dtype(dtype).str)


def _np_ndarray(*args: Any) -> Any:
    raise UnsafePickleError("pickle calls numpy.ndarray directly; arrays are rebuilt only")


def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> _ArrayPlaceholder:
    if cls is not _NDARRAY:
        raise UnsafePickleError("numpy array reconstruction for a type other than ndarray")
    if type(shape) is not tuple or type(typecode) is not bytes:
        raise UnsafePickleError("malformed numpy array reconstruction")
    return _ArrayPlaceholder()


def _np_frombuffer(
    buf: Any, dtype: Any, shape: Any, order: Any, axis_order: Any = None
) -> _ArrayPlaceholder:
    """Protocol 5's array: `_frombuffer(buffer, dtype, shape, order[, axis_order])`."""
    if type(buf) not in (bytes, bytearray) or order not in ("C", "F", "K"):
        raise UnsafePickleError("malformed numpy array (protocol 5)")
    if (order == "K") != (axis_order is not None):
        raise UnsafePickleError("malformed numpy array axis order (protocol 5)")
    array = _ArrayPlaceholder()
    array._set(shape, dtype, "C" if order == "K" else order, bytes(buf), axis_order)
    return array


def _np_scalar(dtype: Any, data: Any = None) -> _ScalarPlaceholder:
    if type(dtype) is not _DTypePlaceholder or type(data) is not bytes:
        raise UnsafePickleError("malformed numpy scalar")
    return _ScalarPlaceholder(dtype, data)


_NDARRAY = _StandIn("numpy.ndarray", _np_ndarray)
_DTYPE = _StandIn("numpy.dtype", _np_dtype)
_RECONSTRUCT = _StandIn("numpy._core.multiarray._reconstruct", _np_reconstruct)
_SCALAR = _StandIn("numpy._core.multiarray.scalar", _np_scalar)
_FROMBUFFER = _StandIn("numpy._core.numeric._frombuffer", _np_frombuffer)

# The numpy globals a pickled numpy scalar or array names, mapped to their stand-ins.
_NUMPY_GLOBALS: dict[tuple[str, str], _StandIn] = {("numpy", "ndarray"): _NDARRAY}
_NUMPY_GLOBALS[("numpy", "dtype")] = _DTYPE
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _NUMPY_GLOBALS[(_module, "_reconstruct")] = _RECONSTRUCT
    _NUMPY_GLOBALS[(_module, "scalar")] = _SCALAR
for _module in ("numpy.core.numeric", "numpy._core.numeric"):
    _NUMPY_GLOBALS[(_module, "_frombuffer")] = _FROMBUFFER


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global except the numpy stand-ins.

    A pickled numpy array names `numpy.ndarray`, `numpy.dtype` and
    `numpy._core.multiarray._reconstruct` (or `numpy._core.numeric._frombuffer`); these resolve
    to stand-ins that return inert placeholders (`safe_pickle_loads` turns them into arrays
    once the pickle is read). Any other global (e.g. `os.system`) raises before it is imported.
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


# ----------------------------------------------------------------------------- opcode scan


class _Slot:
    """What the scan knows of one value on the unpickler's stack: its kind (`"other"`, `"str"`,
    `"global"`, `"dtype"`, `"array"`, built ones `"dtype*"`/`"array*"`, `"mark"`) and, for a
    str or a global, its value."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any = None) -> None:
        self.kind = kind
        self.value = value


_MARK = _Slot("mark")
_OTHER = _Slot("other")  # any value that takes no BUILD (shared: never changed)
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_STRINGS = frozenset({"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
# What calling a stand-in gives: the placeholders that take a BUILD.
_BUILDABLE = {id(_DTYPE): "dtype", id(_RECONSTRUCT): "array"}
_SPECIAL = _MEMO_PUTS | _MEMO_GETS | _STRINGS | {
    "MEMOIZE", "GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "BUILD", "DUP", "POP",
}  # fmt: skip
# Every other opcode's stack effect, from pickletools: (pops to a mark?, values popped (below
# the mark, if any), values pushed).
_EFFECTS: dict[str, tuple[bool, int, tuple[_Slot, ...]]] = {
    op.name: (
        pickletools.stackslice in op.stack_before,
        op.stack_before.index(pickletools.markobject)
        if pickletools.stackslice in op.stack_before
        else len(op.stack_before),
        tuple(_MARK if s is pickletools.markobject else _OTHER for s in op.stack_after),
    )
    for op in pickletools.opcodes
    if op.name not in _SPECIAL
}


def _result_of(callee: _Slot) -> _Slot:
    if callee.kind == "global":
        stand_in = _NUMPY_GLOBALS.get(callee.value)
        if stand_in is not None and id(stand_in) in _BUILDABLE:
            return _Slot(_BUILDABLE[id(stand_in)])
    return _OTHER


def _describe_slot(slot: _Slot) -> str:
    if slot.kind == "global":
        return "the global " + ".".join(slot.value) if slot.value else "a global"
    if slot.kind in ("dtype*", "array*"):
        return f"a numpy {slot.kind[:-1]} whose state is already set"
    return "a value that takes no state (list, dict, str, number or numpy scalar)"


def _underflow() -> UnsafePickleError:
    return UnsafePickleError("malformed pickle: stack underflow")


def _pop_mark(stack: list[_Slot]) -> list[_Slot]:
    """The values above the topmost mark (the mark removed)."""
    for at in range(len(stack) - 1, -1, -1):
        if stack[at] is _MARK:
            above = stack[at + 1 :]
            del stack[at:]
            return above
    raise UnsafePickleError("malformed pickle: no mark on the stack")


def _check_opcodes(data: bytes, budget: BodyBudget | None) -> None:
    """Refuse, before unpickling, what would make the unpickler build something live or
    allocate out of proportion to `data`.

    The scan follows the unpickler's stack (marks included, as the C unpickler's fence: no
    opcode pops past one). `BUILD` (which calls `__setstate__` or sets attributes) is accepted
    only on a placeholder that `numpy.dtype` or `_reconstruct` returned, once; on anything else
    (a stand-in, a list, a numpy scalar) it raises `UnsafePickleError`. A memo index is an
    array index to the C unpickler: `LONG_BINPUT` with index 2^30 in a 13-byte pickle makes it
    allocate 16 GiB. A pickler numbers its memo entries 0, 1, 2, ..., so an index past the
    entries stored so far is refused. Counted lengths that promise more bytes than remain are
    refused the same way (malformed). With a `budget`, the opcodes are at most
    `4 * max_nodes + 1024` (every value needs about one to three), so the scan costs at most a
    fraction of a second (`BodyBudgetError` beyond).
    """
    max_ops = 4 * budget.max_nodes + 1024 if budget is not None else -1
    stack: list[_Slot] = []
    memo: dict[int, _Slot] = {}
    stored = 0
    effects = _EFFECTS
    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(data)):
            if count == max_ops:
                raise BodyBudgetError(
                    f"pickle has more than {max_ops} opcodes (the body may hold at most "
                    f"{budget.max_nodes} values)",  # type: ignore[union-attr]
                    field=None,
                )
            name = op.name
            effect = effects.get(name)
            if effect is not None:  # the generic stack effect pickletools documents
                to_mark, pops, pushes = effect
                if to_mark:
                    _pop_mark(stack)
                for _ in range(pops):
                    if not stack or stack.pop() is _MARK:
                        raise _underflow()
                stack.extend(pushes)
                continue
            if name in _STRINGS:
                stack.append(_Slot("str", arg))
                continue
            if name == "POP":  # at a mark it pops the mark, as the unpickler does
                if not stack:
                    raise _underflow()
                stack.pop()
                continue
            if name in _MEMO_GETS:
                if arg not in memo:
                    raise UnsafePickleError(f"malformed pickle: memo entry {arg} is not stored")
                stack.append(memo[arg])
                continue
            if name == "GLOBAL":
                stack.append(_Slot("global", tuple(arg.split(" ", 1))))
                continue
            if name == "INST":
                _pop_mark(stack)
                stack.append(_result_of(_Slot("global", tuple(arg.split(" ", 1)))))
                continue
            if name == "OBJ":
                above = _pop_mark(stack)
                if not above:
                    raise _underflow()
                stack.append(_result_of(above[0]))
                continue
            # the rest need values above the innermost mark
            if not stack or stack[-1] is _MARK:
                raise _underflow()
            if name in _MEMO_PUTS:
                if arg > stored:
                    raise UnsafePickleError(
                        f"pickle stores memo entry {arg} after only {stored} entries"
                    )
                stored = max(stored, arg + 1)
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
                stored += 1
            elif name == "DUP":
                stack.append(stack[-1])
            else:  # STACK_GLOBAL, REDUCE, BUILD: two values in, one out
                second = stack.pop()
                if not stack or stack[-1] is _MARK:
                    raise _underflow()
                first = stack.pop()
                if name == "STACK_GLOBAL":
                    named = first.kind == "str" and second.kind == "str"
                    stack.append(_Slot("global", (first.value, second.value) if named else None))
                elif name == "REDUCE":
                    stack.append(_result_of(first))
                else:  # BUILD: `second` is the state, `first` the value that takes it
                    if first.kind not in ("dtype", "array"):
                        raise UnsafePickleError(
                            f"pickle sets the state of {_describe_slot(first)} (BUILD); only "
                            "a numpy dtype or array takes a state, once"
                        )
                    first.kind += "*"
                    stack.append(first)
    except (UnsafePickleError, BodyBudgetError):
        raise
    except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and friends
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from None


# ------------------------------------------------------------------------ building the result


def _finalize(obj: Any, memo: dict[int, Any], depth: int) -> Any:
    """`obj` with every placeholder replaced by the numpy value it describes (built once per
    placeholder, so shared references stay shared); lists and dicts are changed in place,
    tuples rebuilt only when they hold a placeholder."""
    kind = type(obj)
    if kind in _ALLOWED_SCALARS:
        return obj
    key = id(obj)
    if key in memo:
        return memo[key]
    if kind is _ArrayPlaceholder or kind is _ScalarPlaceholder:
        memo[key] = value = obj.build()
        return value
    if kind is _DTypePlaceholder:
        raise UnsafePickleError(f"pickle holds a numpy dtype object; {_ALLOWED_TEXT} only")
    if kind not in (list, tuple, dict):
        return obj  # refused by _check_plain, with its type named
    if depth >= _MAX_DEPTH:
        raise UnsafePickleError(f"pickle is nested deeper than {_MAX_DEPTH} levels")
    memo[key] = obj  # a cycle back to this container finds it as it is
    if kind is list:
        for i, item in enumerate(obj):
            new = _finalize(item, memo, depth + 1)
            if new is not item:
                obj[i] = new
        return obj
    if kind is dict:
        items = [
            (_finalize(k, memo, depth + 1), _finalize(v, memo, depth + 1)) for k, v in obj.items()
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
    children = [_finalize(item, memo, depth + 1) for item in obj]
    if any(new is not old for new, old in zip(children, obj, strict=True)):
        memo[key] = rebuilt_tuple = tuple(children)
        return rebuilt_tuple
    return obj


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
            if kind in _PLACEHOLDERS:
                raise UnsafePickleError(
                    "pickle holds a numpy value that refers back to itself; "
                    f"only {_ALLOWED_TEXT} are accepted"
                )
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
    and arrays of bool, integer, float, complex, str or bytes dtype (no structured, subarray or
    object dtypes). A pickle that names any other class or function (e.g. a crafted `os.system`
    call) raises `UnsafePickleError` before anything is imported or called; so does a `BUILD`
    on anything but a numpy dtype or array placeholder (see `_check_opcodes`). Numpy values are
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
    _check_opcodes(bytes(data), budget)
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except RecursionError as exc:
        raise UnsafePickleError("pickle is nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed payload
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from exc
    try:
        obj = _finalize(obj, {}, 0)
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
