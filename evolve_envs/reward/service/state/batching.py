"""Request coalescing: items from concurrent requests become backend batches of at most 8, in one
backend thread, with an adaptive window (evolve_envs/reward/service/README.md, "Batching").

Example (inside a running event loop):
    >>> batcher = Batcher(MockBackend(), Metrics(), max_batch=8, window_s=0.005)  # doctest: +SKIP
    >>> critics = await batcher.run("critic", items)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from evolve_envs.reward.service.backends.base import (
    Backend,
    BackendError,
    OutOfRangeError,
    check_range,
)
from evolve_envs.reward.service.decoding.images import resize_square
from evolve_envs.reward.service.state.metrics import Metrics

__all__ = ["Batcher", "FRAME_SIZE", "MAX_BATCH", "MAX_WINDOW_S", "prepare_frame"]

FRAME_SIZE = 448
MAX_BATCH = 8
MAX_WINDOW_S = 0.25  # the adaptive window's cap: the most a batch waits for the rest of a burst
WAIT_FRACTION = 0.25  # ... and at most this fraction of the backend's recent call time

T = TypeVar("T")


def prepare_frame(frame: np.ndarray) -> np.ndarray:
    """Resize a decoded frame to the model input size (`FRAME_SIZE` square)."""
    return resize_square(frame, FRAME_SIZE)


@dataclass
class _Entry:
    request_id: int
    item: object
    future: asyncio.Future[object]
    arrived: float


class _BurstHistory:
    """Sizes (in requests) of the last bursts of one item kind, for the adaptive window."""

    def __init__(self, history: int, max_window_s: float) -> None:
        self.sizes: deque[int] = deque(maxlen=history)
        self.max_window_s = max_window_s
        self._start: float | None = None
        self._requests: set[int] = set()

    def target(self) -> int:
        """Requests to wait for: the largest recent burst."""
        return max(self.sizes, default=1)

    def burst_of(self, arrived: float) -> tuple[float, set[int]]:
        """Start and requests so far of the burst an item arriving at `arrived` belongs to."""
        if self._start is not None and arrived <= self._start + self.max_window_s:
            return self._start, set(self._requests)
        return arrived, set()

    def record(self, arrivals: Sequence[tuple[float, int]]) -> None:
        """Account a flushed batch from its items' ``(arrival time, request id)``, in order."""
        for arrived, request_id in arrivals:
            if self._start is None or arrived > self._start + self.max_window_s:
                self._start = arrived
                self._requests = set()
                self.sizes.append(0)
            if request_id not in self._requests:
                self._requests.add(request_id)
                self.sizes[-1] += 1


class Batcher:
    """Coalesces items of concurrent requests into backend batches (see module docs)."""

    def __init__(
        self,
        backend: Backend,
        metrics: Metrics,
        *,
        max_batch: int = MAX_BATCH,
        window_s: float = 0.005,
        max_window_s: float = MAX_WINDOW_S,
        history: int = 8,
        wait_fraction: float = WAIT_FRACTION,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if max_window_s < 0:
            raise ValueError(f"max_window_s must be >= 0, got {max_window_s}")
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        if not 0 <= wait_fraction <= 1:
            raise ValueError(f"wait_fraction must be in [0, 1], got {wait_fraction}")
        self.backend = backend
        self.metrics = metrics
        self.max_batch = max_batch
        self.window_s = window_s
        self.max_window_s = max_window_s
        self.history = history
        self.wait_fraction = wait_fraction
        self._call_s: dict[str, float] = {}  # moving average of backend call time per kind
        self._bursts: dict[str, _BurstHistory] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-backend")
        self._queues: dict[str, asyncio.Queue[_Entry]] = {}
        self._consumers: dict[str, asyncio.Task[None]] = {}
        self._ids = itertools.count()
        self._calls: dict[str, Callable[[Sequence[object]], list[object]]] = {
            "critic": backend.critic_batch,
            "done": backend.done_batch,
            "image": backend.score_images,
        }

    # --- public ---------------------------------------------------------------------------------
    async def run(self, kind: str, items: Sequence[object]) -> list[object]:
        """Results for `items` (in order), computed in coalesced backend batches."""
        if kind not in self._calls:
            raise ValueError(f"unknown batch kind {kind!r}")
        if not items:
            return []
        queue = self._queue(kind)
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        futures = []
        for item in items:
            fut: asyncio.Future[object] = loop.create_future()
            futures.append(fut)
            queue.put_nowait(_Entry(request_id, item, fut, loop.time()))
        return list(await asyncio.gather(*futures))

    async def call(self, kind: str, fn: Callable[..., T], *args: object) -> T:
        """Run one backend call (e.g. a video score) in the backend thread, counted as a batch;
        its answer is held to the range of `kind` (see `checked_answer`)."""
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor, fn, *args)
        self.metrics.record_batch(kind, 1)
        return checked_answer(kind, result)

    async def aclose(self) -> None:
        """Stop the consumers, fail what is still queued and release the backend thread."""
        for task in self._consumers.values():
            task.cancel()
        for task in self._consumers.values():
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        for queue in self._queues.values():
            while not queue.empty():
                entry = queue.get_nowait()
                if not entry.future.done():
                    entry.future.set_exception(BackendError("server is shutting down"))
        self._consumers.clear()
        self._queues.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def cap(self, kind: str) -> float:
        """The adaptive window's current cap for `kind` (seconds; see the module docs)."""
        wait = self.wait_fraction * self._call_s.get(kind, 0.0)
        return min(self.max_window_s, max(self.window_s, wait))

    # --- internals ------------------------------------------------------------------------------
    def _queue(self, kind: str) -> asyncio.Queue[_Entry]:
        queue = self._queues.get(kind)
        if queue is None:
            queue = asyncio.Queue()
            self._queues[kind] = queue
            self._consumers[kind] = asyncio.get_running_loop().create_task(
                self._consume(kind, queue), name=f"batcher-{kind}"
            )
        return queue

    async def _collect(self, kind: str, queue: asyncio.Queue[_Entry]) -> list[_Entry]:
        batch = [await queue.get()]
        loop = asyncio.get_running_loop()
        bursts = self._bursts.setdefault(kind, _BurstHistory(self.history, self.window_s))
        bursts.max_window_s = self.cap(kind)
        target = bursts.target()
        burst_start, requests = bursts.burst_of(batch[0].arrived)
        requests.add(batch[0].request_id)
        window_end = loop.time() + self.window_s
        burst_end = burst_start + bursts.max_window_s
        while len(batch) < self.max_batch:
            if not queue.empty():
                entry = queue.get_nowait()
            else:
                waiting = len(requests) < target
                deadline = max(window_end, burst_end) if waiting else window_end
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    entry = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    break
            batch.append(entry)
            requests.add(entry.request_id)
        bursts.record([(entry.arrived, entry.request_id) for entry in batch])
        return [entry for entry in batch if not entry.future.done()]

    async def _consume(self, kind: str, queue: asyncio.Queue[_Entry]) -> None:
        while True:
            batch = await self._collect(kind, queue)
            if not batch:
                continue
            try:
                await self._execute(kind, batch)
            except Exception as exc:  # noqa: BLE001 - delivered to the waiting requests
                if len({entry.request_id for entry in batch}) > 1:
                    for group in _group_by_request(batch):
                        try:
                            await self._execute(kind, group)
                        except Exception as group_exc:  # noqa: BLE001
                            _fail(group, group_exc)
                else:
                    _fail(batch, exc)

    async def _execute(self, kind: str, batch: list[_Entry]) -> None:
        call = self._calls[kind]
        items = [entry.item for entry in batch]
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        results = await loop.run_in_executor(self._executor, call, items)
        took = time.perf_counter() - t0
        prev = self._call_s.get(kind)
        self._call_s[kind] = took if prev is None else 0.8 * prev + 0.2 * took
        self.metrics.record_batch(kind, len(items))
        if len(results) != len(items):
            raise BackendError(
                f"backend {self.backend.name!r} returned {len(results)} results for "
                f"{len(items)} {kind} items"
            )
        failed = 0
        for entry, result in zip(batch, results, strict=True):
            if not isinstance(result, BaseException):
                try:
                    result = checked_answer(kind, result)
                except OutOfRangeError as exc:  # that item alone fails
                    if not entry.future.done():
                        entry.future.set_exception(exc)
                    continue
            if isinstance(result, BaseException):  # that item alone failed (a malformed answer)
                failed += 1
                result.counted = True  # type: ignore[attr-defined]
                if not entry.future.done():
                    entry.future.set_exception(result)
            elif not entry.future.done():
                entry.future.set_result(result)
        if failed:
            self.metrics.record_malformed(kind, failed)


def checked_answer(kind: str, result: object) -> object:
    """A backend's answer for one item of `kind`, its number held to the documented range."""
    if kind in ("done", "video"):
        first, second = result
        if kind == "done":
            return bool(first), check_range(kind, second)
        return check_range(kind, first), second
    return check_range(kind, result)


def _group_by_request(batch: list[_Entry]) -> list[list[_Entry]]:
    groups: dict[int, list[_Entry]] = {}
    for entry in batch:
        groups.setdefault(entry.request_id, []).append(entry)
    return list(groups.values())


def _fail(batch: list[_Entry], exc: BaseException) -> None:
    for entry in batch:
        if not entry.future.done():
            entry.future.set_exception(exc)
