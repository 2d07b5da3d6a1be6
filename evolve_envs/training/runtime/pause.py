"""The synchronous barrier of ``distrl.barrier``, both sides: the learner pauses the workers
through the weight registry (:func:`hold_workers`) and a worker sits the pause out
(:func:`sit_out`); :func:`hold_workers` shows it on a plain registry."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from evolve_envs.training.runtime.weight_registry import WeightRegistry

__all__ = ["PAUSE_COUNTS", "hold_workers", "sit_out"]

#: The weight registry itself, or its Ray actor handle.
Registry: TypeAlias = "WeightRegistry | ActorHandle"

#: A worker's pause counters: pauses sat out, and milliseconds spent in them.
PAUSE_COUNTS: dict[str, int] = {"pauses": 0, "paused_ms": 0}


def _get(ref: object) -> object:
    import ray

    return ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref


def _call(method: Callable[..., object], *args: object) -> object:
    return method.remote(*args) if hasattr(method, "remote") else method(*args)


def sit_out(
    registry: Registry, worker_id: int, have: int, load: Callable[[object, int], None]
) -> tuple[bool, int]:
    """Wait out a pause as a paused worker, loading weights newer than ``have`` with
    ``load(state_dict, version)``; returns (stop flag, milliseconds waited)."""
    t0 = time.monotonic()
    while True:
        answer = _get(_call(registry.poll, worker_id, have, True))
        if answer["ref"] is not None and answer["ref"][0] is not None:
            load(_get(answer["ref"][0]), answer["version"])
            have = int(answer["version"])
        if answer["stop"] or not answer["pause"]:
            return bool(answer["stop"]), int(1000 * (time.monotonic() - t0))
        time.sleep(0.005)


def hold_workers(
    registry: Registry, n_workers: int, check: Callable[[], None] = lambda: None
) -> float:
    """Pause the workers and wait until all ``n_workers`` have stopped stepping (``check`` runs
    while waiting); returns the seconds waited.

    Example (the plain registry, the worker answering in the check):
        >>> from evolve_envs.training.runtime.weight_registry import WeightRegistry
        >>> reg = WeightRegistry()
        >>> waited = hold_workers(reg, 1, check=lambda: reg.poll(0, -1, True))
        >>> reg.paused(), waited >= 0.0
        (1, True)
    """
    t0 = time.monotonic()
    _call(registry.pause)
    while _get(_call(registry.paused)) < n_workers:
        check()
        time.sleep(0.002)
    return time.monotonic() - t0
