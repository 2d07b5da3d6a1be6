"""How a rollout worker hands trajectories to the learner's queue without waiting for it.

A :class:`TrajectoryPusher` sends each trajectory to a ``ray.util.queue.Queue``'s actor and
counts it ``pushed`` or ``dropped`` (a full queue) when the answer arrives; any other queue
(anything with ``put_nowait``) is called and counted at once.

>>> import queue
>>> counts = {"pushed": 0, "dropped": 0}
>>> pusher = TrajectoryPusher(queue.Queue(maxsize=1), counts)
>>> pusher.push("a"); pusher.push("b"); pusher.flush(); counts
{'pushed': 1, 'dropped': 1}
"""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["TrajectoryPusher"]


class PutNowait(Protocol):
    """A queue the pusher can use: ``put_nowait`` raising ``Full`` when it is full."""

    def put_nowait(self, item: object) -> None: ...


class TrajectoryPusher:
    """Puts trajectories into ``queue`` and counts them in ``counts`` (``pushed``/``dropped``)."""

    #: Queue puts in flight at most. One: a put is sent only once the previous one was answered
    #: (normally long before: an episode or segment later), so trajectories reach the queue in
    #: the order they were made (the queue's actor may run two waiting puts in either order).
    MAX_PUTS_IN_FLIGHT = 1

    def __init__(self, queue: PutNowait, counts: dict[str, int]) -> None:
        self.queue = queue
        self.counts = counts
        self.puts: list[ObjectRef] = []  # queue puts not yet answered

    def push(self, traj: object) -> None:
        """Send ``traj``; a Ray queue's answer is counted later (:meth:`count`)."""
        from ray.util.queue import Full

        actor = getattr(self.queue, "actor", None)
        if actor is None:
            try:
                self.queue.put_nowait(traj)
                self.counts["pushed"] += 1
            except (Full, stdlib_queue.Full):
                self.counts["dropped"] += 1
            return
        if len(self.puts) >= self.MAX_PUTS_IN_FLIGHT:
            self.count(wait=True, keep=self.MAX_PUTS_IN_FLIGHT - 1)
        self.puts.append(actor.put_nowait.remote(traj))

    def count(self, wait: bool = False, keep: int = 0) -> None:
        """Count the answered puts; with ``wait``, first wait until at most ``keep`` are left."""
        import ray

        if not self.puts:
            return
        if wait:
            ray.wait(self.puts, num_returns=len(self.puts) - keep)
        done, _ = ray.wait(self.puts, num_returns=len(self.puts), timeout=0)
        for ref in done:
            self.puts.remove(ref)
            try:
                ray.get(ref)
                self.counts["pushed"] += 1
            except asyncio.QueueFull:  # the queue actor's error, re-raised here
                self.counts["dropped"] += 1

    def flush(self) -> None:
        """Wait for every answer and count it."""
        self.count(wait=True)
