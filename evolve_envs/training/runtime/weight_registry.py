"""The weight registry: how the learner broadcasts weights to rollout workers, and they report.

:class:`WeightRegistry` runs as a small Ray actor (:func:`evolve_envs.training.loop.run_loop` starts
it); workers poll it between steps without blocking, and it counts their incarnations and
trajectories.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["PollAnswer", "WeightRegistry"]

#: A worker's poll answer: newer weights (``ref``: ``[ObjectRef]`` or None), the version, the
#: stop and pause flags.
PollAnswer: TypeAlias = "dict[str, int | bool | list[ObjectRef | None] | None]"


class WeightRegistry:
    """The small actor through which the learner broadcasts weights and workers report: the newest
    ``(version, [ObjectRef])`` (in a list, so Ray does not resolve it), the stop and pause flags,
    per-worker counters.

    >>> reg = WeightRegistry()
    >>> reg.publish(3, ["ref-of-v3"])
    >>> reg.poll(0, have=2)["ref"], reg.poll(0, have=3)["ref"]
    (['ref-of-v3'], None)
    >>> reg.hello(0, pid=41), reg.hello(0, pid=42), reg.workers()
    (1, 2, {0: {'incarnations': 2, 'pid': 42}})
    """

    def __init__(self) -> None:
        self._version = -1
        self._ref: list[ObjectRef | None] = [None]
        self._stop = False
        self._pause = False
        self._paused: set[int] = set()
        self._workers: dict[int, dict[str, int]] = {}
        self._where: dict[int, list[dict[str, object]]] = {}

    def publish(self, version: int, ref: list[ObjectRef]) -> None:
        """Make ``ref[0]`` (an ObjectRef of a state_dict) the newest weights, as ``version``."""
        self._version, self._ref = int(version), list(ref)

    def poll(self, worker_id: int, have: int, paused: bool = False) -> PollAnswer:
        """What a worker holding version ``have`` needs: the newest version, its reference when
        newer (else None), whether to stop and whether to pause; ``paused``: the worker has
        stopped stepping for a pause (counted by :meth:`paused`)."""
        newer = self._version > have
        if paused and self._pause:
            self._paused.add(int(worker_id))
        return {
            "version": self._version,
            "ref": self._ref if newer else None,
            "stop": self._stop,
            "pause": self._pause,
        }

    def pause(self) -> None:
        """Ask every worker to stop stepping (``distrl.barrier``) until :meth:`resume`.

        Example:
            >>> reg = WeightRegistry()
            >>> reg.pause(); _ = reg.poll(0, -1, paused=True); reg.paused()
            1
        """
        self._pause, self._paused = True, set()

    def resume(self) -> None:
        """End the pause: the workers step on (with the newest weights)."""
        self._pause, self._paused = False, set()

    def paused(self) -> int:
        """How many workers have stopped stepping since the last :meth:`pause`."""
        return len(self._paused)

    def hello(self, worker_id: int, pid: int = 0, where: Mapping[str, object] | None = None) -> int:
        """A worker (re)started in process ``pid``: count and return its incarnation, and keep
        ``where`` it runs (node id, reward transport) for :meth:`placements`."""
        w = self._workers.setdefault(worker_id, {"incarnations": 0})
        w["incarnations"] += 1
        w["pid"] = int(pid)
        self._where.setdefault(worker_id, []).append(dict(where or {}))
        return w["incarnations"]

    def placements(self) -> dict[int, list[dict[str, object]]]:
        """Per worker, where each incarnation ran (oldest first)."""
        return {k: [dict(x) for x in v] for k, v in self._where.items()}

    def report(self, worker_id: int, counts: Mapping[str, int]) -> None:
        """Add a worker's counters (``pushed``, ``dropped``, ``env_steps``, ...)."""
        w = self._workers.setdefault(worker_id, {"incarnations": 0})
        for k, v in counts.items():
            if k != "pid":
                w[k] = w.get(k, 0) + int(v)

    def stop(self) -> None:
        """Ask every worker's :meth:`RolloutWorker.run` loop to return."""
        self._stop = True

    def workers(self) -> dict[int, dict[str, int]]:
        """Per-worker counters."""
        return {k: dict(v) for k, v in self._workers.items()}
