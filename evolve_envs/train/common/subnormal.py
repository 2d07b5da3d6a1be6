"""Flush subnormal floats to zero while training on the CPU.

Adam's moments of a parameter whose gradient has died out decay into the subnormal range
(below about 1.2e-38 in float32), and a CPU computes with subnormals many times slower: on
ReachPlace's CNN policy a DistRL update from such a state took 110-130 ms against 17-19 ms
with them flushed (bench/RESULTS.md, "D5 protocol", stage 3). Flushing changes values only
below that range.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["flush_subnormals"]


@contextmanager
def flush_subnormals() -> Iterator[bool]:
    """Flush subnormal floats to zero in this process (torch's CPU kernels) while inside; yields
    whether the CPU supports it. On leaving, the process default (no flushing) is back.

    Example:
        >>> import torch
        >>> tiny = torch.tensor([1e-39])
        >>> with flush_subnormals() as supported:
        ...     inside = float(tiny * 1.0)
        >>> (inside == 0.0) == supported, float(tiny * 1.0) > 0.0
        (True, True)
    """
    import torch

    supported = bool(torch.set_flush_denormal(True))
    try:
        yield supported
    finally:
        torch.set_flush_denormal(False)
