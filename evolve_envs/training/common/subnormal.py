"""Flush subnormal floats to zero while training on the CPU."""

# Some learner states make each CPU update several times slower through subnormal arithmetic
# (values below float32's normal range, about 1.2e-38): DistRL updates of ReachPlace's CNN policy
# from such states took 5-6x as long as with subnormals flushed to zero, which changes only values
# below that range (bench/results/subnormal_updates/subnormal_updates.md).

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["flush_subnormals"]


@contextmanager
def flush_subnormals() -> Iterator[bool]:
    """Flush subnormals to zero in this process while inside (the default is back on leaving);
    yields whether the CPU can. Also a decorator (``run_loop``).

    >>> import torch
    >>> with flush_subnormals() as supported:
    ...     inside = float(torch.tensor([1e-39]) * 1.0)
    >>> (inside == 0.0) == supported, float(torch.tensor([1e-39]) * 1.0) > 0.0
    (True, True)
    """
    import torch

    supported = bool(torch.set_flush_denormal(True))
    try:
        yield supported
    finally:
        torch.set_flush_denormal(False)
