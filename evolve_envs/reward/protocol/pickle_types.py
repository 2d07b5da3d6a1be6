"""The plain types the pickle codec accepts, and `UnsafePickleError` for anything else.

Shared by the codec (:mod:`evolve_envs.reward.protocol.pickle_codec`), its opcode scan
(:mod:`evolve_envs.reward.protocol.pickle_scan`) and its NumPy placeholders
(:mod:`evolve_envs.reward.protocol.numpy_placeholders`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ALLOWED_SCALARS",
    "ALLOWED_TEXT",
    "MAX_DEPTH",
    "UnsafePickleError",
    "safe_dtype",
]


class UnsafePickleError(ValueError):
    """A pickle refers to a global (class, function) or holds a type outside the allowed set.

    >>> import os, pickle
    >>> from evolve_envs.reward.protocol.pickle_codec import safe_pickle_loads
    >>> try:
    ...     safe_pickle_loads(pickle.dumps(os.getcwd))  # a pickle that names a function
    ... except UnsafePickleError as exc:
    ...     print(str(exc).split(";")[0])
    pickle refers to the global posix.getcwd
    """


ALLOWED_SCALARS = (bytes, str, int, float, bool, type(None))
MAX_DEPTH = 64
# numpy dtype kinds a pickle may carry: bool, signed/unsigned int, float, complex, str, bytes.
_NUMPY_KINDS = frozenset("biufcUS")
ALLOWED_TEXT = (
    "bytes, str, int, float, bool, None, list, tuple, dict and numpy scalars/arrays of "
    "numeric, bool or str dtype"
)


def safe_dtype(dtype: Any) -> Any:
    """`dtype` as a numpy dtype if its kind is allowed and it has no fields, subarray or metadata.

    >>> safe_dtype(">i4").str
    '>i4'
    """
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
