"""The synchronous barrier of ``learner.barrier``, both sides: the learner pauses the workers
through the weight registry (:func:`hold_workers`) and a worker sits the pause out
(:func:`sit_out`). The examples below run both on a plain registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["PAUSE_COUNTS", "hold_workers", "sit_out"]

#: A worker's pause counters: pauses sat out, and milliseconds spent in them.
PAUSE_COUNTS: dict[str, int] = {"pauses": 0, "paused_ms": 0}


def _get(ref: Any) -> Any:
    import ray

    return ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref


def _call(method: Any, *args: Any) -> Any:
    return method.remote(*args) if hasattr(method, "remote") else method(*args)


def sit_out(
    registry: Any, worker_id: int, have: int, load: Callable[[Any, int], None]
) -> tuple[bool, int]:
    """Wait out a pause: poll ``registry`` as a paused worker until the pause ends, calling
    ``load(state_dict, version)`` for weights newer than ``have``. Returns (stop flag,
    milliseconds waited).

    Example (the plain registry, paused and resumed by the second poll):
        >>> from evolve_envs.train.runtime.weight_registry import WeightRegistry
        >>> reg = WeightRegistry(); reg.publish(4, [{"w": 1}]); reg.pause()
        >>> real_poll = reg.poll
        >>> def poll(*args):
        ...     answer = real_poll(*args); reg.resume(); return answer
        >>> reg.poll = poll
        >>> loaded = []
        >>> stop, ms = sit_out(reg, 0, 3, lambda sd, v: loaded.append(v))
        >>> stop, loaded
        (False, [4])
    """
    t0 = time.monotonic()
    while True:
        answer = _get(_call(registry.poll, worker_id, have, True))
        if answer["ref"] is not None and answer["ref"][0] is not None:
            load(_get(answer["ref"][0]), answer["version"])
            have = int(answer["version"])
        if answer["stop"] or not answer["pause"]:
            return bool(answer["stop"]), int(1000 * (time.monotonic() - t0))
        time.sleep(0.005)


def hold_workers(registry: Any, n_workers: int, check: Callable[[], None] = lambda: None) -> float:
    """Pause the workers and wait until all ``n_workers`` have stopped stepping; ``check`` runs
    while waiting (a worker loop that ended raises there). Returns the seconds waited.

    Example (the plain registry, the worker answering in the check):
        >>> from evolve_envs.train.runtime.weight_registry import WeightRegistry
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
