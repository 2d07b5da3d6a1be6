"""CameraAverageClient: one progress judgement averaged over several cameras.

`ProgressReward` with a tuple of cameras hands the progress client *stacked* frames, one
``K x H x W x 3`` array per moment (camera k at index k). This client splits each stack, asks the
wrapped client once per camera (concurrently, through its ``submit_*`` methods) and averages:

* pairwise critic: the mean of the cameras' critics;
* trajectory values: the element-wise mean of the cameras' ``value_list`` and ``critic_list``;
* done: ``prob`` is the mean probability, ``done`` is true when at least half the cameras say so.

If any camera's call fails, the combined result is that failure (its fallback value, ``ok``
false): an average over the cameras that happened to answer would change scale silently.

Example:
    >>> import numpy as np
    >>> class Fake:  # any progress client: here a critic equal to the mean grey level
    ...     def submit_pairwise_critic(self, task, a, b):
    ...         from concurrent.futures import Future
    ...         f = Future(); f.set_result(CallResult(float(b.mean()), True, False, 0.0, None))
    ...         return f
    >>> client = CameraAverageClient(Fake(), cameras=2)
    >>> a = np.stack([np.full((4, 4, 3), 10, np.uint8), np.full((4, 4, 3), 30, np.uint8)])
    >>> client.pairwise_critic("t", a, a).value
    20.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from evolve_envs.reward.clients.progress_client import DoneResult, ProgressClient, TrajectoryValues
from evolve_envs.reward.clients.results import CallResult

V = TypeVar("V")
R = TypeVar("R")

__all__ = ["CameraAverageClient"]


class CameraAverageClient:
    """Averages a progress client's answers over `cameras` stacked views (see module docs).

    Args:
        client: the wrapped progress client (a `ProgressClient` or one with the same methods).
        cameras: how many views each stacked frame holds.
        close_inner: `close()` also closes `client` (False when its owner closes it).
    """

    def __init__(self, client: ProgressClient, cameras: int, *, close_inner: bool = True) -> None:
        if int(cameras) < 1:
            raise ValueError(f"cameras must be >= 1, got {cameras}")
        self.client = client
        self.cameras = int(cameras)
        self.close_inner = bool(close_inner)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="camavg")

    def __getattr__(self, name: str) -> object:  # capabilities, stats, pool, close ... pass through
        return getattr(self.client, name)

    def _view(self, frame: np.ndarray, k: int) -> np.ndarray:
        arr = np.asarray(frame)
        if arr.ndim != 4 or arr.shape[0] != self.cameras:
            raise ValueError(
                f"expected {self.cameras} stacked camera frames (K x H x W x 3), got {arr.shape}"
            )
        return arr[k]

    def _combine(
        self, results: Sequence[CallResult[V]], merge: Callable[[list[V]], R]
    ) -> CallResult[R]:
        for r in results:
            if not r.ok:
                return r
        first = results[0]
        return CallResult(
            merge([r.value for r in results]),
            True,
            False,
            max(r.latency_s for r in results),
            first.endpoint,
            None,
            sum(r.attempts for r in results),
        )

    def _each(
        self, method: str, make_args: Callable[[int], tuple[object, ...]], **kwargs: object
    ) -> list[CallResult[V]]:
        submit = getattr(self.client, f"submit_{method}")
        futures = [submit(*make_args(k), **kwargs) for k in range(self.cameras)]
        return [f.result() for f in futures]

    # --- pairwise -------------------------------------------------------------------------------
    def pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> CallResult[float]:
        """The mean critic over the cameras."""
        results = self._each(
            "pairwise_critic", lambda k: (task, self._view(image_a, k), self._view(image_b, k))
        )
        return self._combine(results, lambda v: float(np.mean(v)))

    def submit_pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> Future[CallResult[float]]:
        """Non-blocking :meth:`pairwise_critic`."""
        a, b = np.array(image_a, copy=True), np.array(image_b, copy=True)
        return self._pool.submit(self.pairwise_critic, task, a, b)

    # --- trajectory -----------------------------------------------------------------------------
    def trajectory_values(
        self, task: str, frames: Sequence[np.ndarray], **kwargs: object
    ) -> CallResult[TrajectoryValues | None]:
        """The element-wise mean of the cameras' values and critics."""
        results = self._each(
            "trajectory_values", lambda k: (task, [self._view(f, k) for f in frames]), **kwargs
        )

        def merge(values: list[TrajectoryValues]) -> TrajectoryValues:
            return TrajectoryValues(
                value_list=[float(x) for x in np.mean([v.value_list for v in values], axis=0)],
                critic_list=[float(x) for x in np.mean([v.critic_list for v in values], axis=0)],
                indices=list(values[0].indices),
            )

        return self._combine(results, merge)

    def submit_trajectory_values(
        self, task: str, frames: Sequence[np.ndarray], **kwargs: object
    ) -> Future[CallResult[TrajectoryValues | None]]:
        """Non-blocking :meth:`trajectory_values`."""
        copies = [np.array(f, copy=True) for f in frames]
        return self._pool.submit(self.trajectory_values, task, copies, **kwargs)

    # --- done -----------------------------------------------------------------------------------
    def done(
        self,
        task: str,
        first: np.ndarray,
        prev: np.ndarray,
        curr: np.ndarray,
        **kwargs: object,
    ) -> CallResult[DoneResult]:
        """Mean probability; done when at least half the cameras say done."""
        results = self._each(
            "done",
            lambda k: (task, self._view(first, k), self._view(prev, k), self._view(curr, k)),
            **kwargs,
        )

        def merge(values: list[DoneResult]) -> DoneResult:
            probs = [v.prob for v in values if v.prob is not None]
            votes = sum(bool(v.done) for v in values)
            prob = float(np.mean(probs)) if len(probs) == len(values) else None
            return DoneResult(done=2 * votes >= len(values), prob=prob)

        return self._combine(results, merge)

    def submit_done(
        self,
        task: str,
        first: np.ndarray,
        prev: np.ndarray,
        curr: np.ndarray,
        **kwargs: object,
    ) -> Future[CallResult[DoneResult]]:
        """Non-blocking :meth:`done`."""
        frames = [np.array(f, copy=True) for f in (first, prev, curr)]
        return self._pool.submit(self.done, task, *frames, **kwargs)

    def close(self) -> None:
        """Stop this client's workers, then close the wrapped client (if `close_inner`)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.close_inner:
            self.client.close()
