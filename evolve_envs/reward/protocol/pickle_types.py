"""The plain types the pickle codec accepts, and `UnsafePickleError` for anything else."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "PlainValue",
    "ALLOWED_SCALARS",
    "ALLOWED_TEXT",
    "MAX_DEPTH",
    "UnsafePickleError",
    "safe_dtype",
]


class UnsafePickleError(ValueError):
    """A pickle refers to a global (class, function) or holds a type outside the allowed set.

    >>> safe_dtype("<f4")
    dtype('float32')
    >>> safe_dtype(object)
    Traceback (most recent call last):
    ...
    evolve_envs.reward.protocol.pickle_types.UnsafePickleError: pickle holds a numpy dtype('O') \
value; bytes, str, int, float, bool, None, list, tuple, dict and numpy scalars/arrays of ...
    """


#: What the codec decodes to: plain values, containers of them, numpy scalars and arrays.
PlainValue: TypeAlias = (
    "bytes | str | int | float | bool | None | list[PlainValue] | tuple[PlainValue, ...]"
    " | dict[PlainValue, PlainValue] | np.generic | np.ndarray"
)
ALLOWED_SCALARS = (bytes, str, int, float, bool, type(None))
MAX_DEPTH = 64
# numpy dtype kinds a pickle may carry: bool, signed/unsigned int, float, complex, str, bytes.
_NUMPY_KINDS = frozenset("biufcUS")
ALLOWED_TEXT = (
    "bytes, str, int, float, bool, None, list, tuple, dict and numpy scalars/arrays of "
    "numeric, bool or str dtype"
)


def safe_dtype(dtype: object) -> np.dtype:
    """`dtype` as a numpy dtype if its kind is allowed and it has no fields, subarray or
    metadata."""
    import numpy as np

    dtype = np.dtype(dtype)
    if (
        dtype.kind not in _NUMPY_KINDS
        or dtype.hasobject
        or dtype.fields is not None
        or dtype.subdtype is not None
        or dtype.metadata
    ):
        raise UnsafePickleError(f"pickle holds a numpy {dtype!r} value; {ALLOWED_TEXT} only")
    return dtype
