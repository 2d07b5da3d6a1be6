"""The batcher's adaptive window: bursts of staggered requests end up in one backend batch.

Requests are posted into a real :class:`Batcher` over the real mock backend (a subclass that
records the size of every backend call; 100 ms per call, and the adaptive wait may take the whole
call time, ``wait_fraction=1``); the stagger between requests is longer than the base window, so
a fixed window always splits a burst.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evolve_envs.reward.service.backends.base import CriticItem
from evolve_envs.reward.service.backends.mock import MockBackend, mock_critic, paint_level
from evolve_envs.reward.service.state.batching import Batcher
from evolve_envs.reward.service.state.metrics import Metrics


class RecordingMock(MockBackend):
    """The mock backend, remembering the size of each critic batch."""

    def __init__(self) -> None:
        super().__init__(rule="intensity", latency_ms=100)
        self.sizes: list[int] = []

    def critic_batch(self, items):  # type: ignore[no-untyped-def]
        self.sizes.append(len(items))
        return super().critic_batch(items)


def _item(pa: int, pb: int) -> CriticItem:
    a = np.full((8, 8, 3), paint_level(pa), np.uint8)
    b = np.full((8, 8, 3), paint_level(pb), np.uint8)
    return CriticItem(task="t", image_a=a, image_b=b, first=a)


async def _bursts(batcher: Batcher, n_bursts: int, clients: int, gap_s: float) -> list:
    """`n_bursts` rounds; in each, `clients` single-item requests posted `gap_s` apart."""

    async def client(k: int) -> list[float]:
        await asyncio.sleep(k * gap_s)
        return await batcher.run("critic", [_item(10 * k, 10 * k + 5)])

    results = []
    try:
        for _ in range(n_bursts):
            results.append(await asyncio.gather(*(client(k) for k in range(clients))))
            await asyncio.sleep(0.6)  # the next burst starts after this one's window is over
    finally:
        await batcher.aclose()
    return results


def _run(max_window_s: float, clients: int = 4, n_bursts: int = 3) -> tuple[list, list[int]]:
    backend = RecordingMock()
    batcher = Batcher(
        backend, Metrics(), window_s=0.005, max_window_s=max_window_s, wait_fraction=1.0
    )
    results = asyncio.run(_bursts(batcher, n_bursts, clients, gap_s=0.02))
    return results, backend.sizes


def test_adaptive_window_gathers_a_staggered_burst_into_one_batch() -> None:
    results, sizes = _run(max_window_s=0.5)
    # the first burst is split (nothing known yet); from then on each burst is one batch
    assert sum(sizes[:-2]) == 4 and len(sizes) >= 4
    assert sizes[-2:] == [4, 4]
    expected = [mock_critic(10 * k, 10 * k + 5) for k in range(4)]
    for burst in results:
        assert [r[0] for r in burst] == pytest.approx(expected)


def test_fixed_window_splits_the_same_bursts() -> None:
    _, sizes = _run(max_window_s=0.0)
    assert len(sizes) >= 6 and max(sizes) <= 3  # every burst of 4 took two calls or more


def test_lone_requests_after_a_burst_are_answered_and_the_history_forgets() -> None:
    async def scenario() -> tuple[list[int], list[float], int]:
        backend = RecordingMock()
        batcher = Batcher(
            backend, Metrics(), window_s=0.005, max_window_s=0.2, history=2, wait_fraction=1.0
        )
        try:
            await asyncio.gather(*(batcher.run("critic", [_item(0, 50)]) for _ in range(3)))
            out = []
            for _ in range(3):  # lone requests: the history forgets the burst of 3
                await asyncio.sleep(0.3)
                out += await batcher.run("critic", [_item(20, 60)])
            return backend.sizes, out, batcher._bursts["critic"].target()
        finally:
            await batcher.aclose()

    sizes, out, target = asyncio.run(scenario())
    assert sizes == [3, 1, 1, 1]
    assert target == 1  # the next lone request is sent after the base window
    assert out == pytest.approx([mock_critic(20, 60)] * 3)


def test_cap_follows_the_backend_call_time() -> None:
    async def scenario() -> tuple[float, float]:
        batcher = Batcher(RecordingMock(), Metrics(), window_s=0.005, max_window_s=0.25)
        try:
            before = batcher.cap("critic")
            await batcher.run("critic", [_item(0, 50)])
            return before, batcher.cap("critic")
        finally:
            await batcher.aclose()

    before, after = asyncio.run(scenario())
    assert before == 0.005  # nothing known yet: the fixed window
    assert 0.025 <= after <= 0.25  # a quarter of a >= 100 ms call


def test_batcher_rejects_bad_window_settings() -> None:
    with pytest.raises(ValueError, match="max_window_s"):
        Batcher(MockBackend(), Metrics(), max_window_s=-1)
    with pytest.raises(ValueError, match="wait_fraction"):
        Batcher(MockBackend(), Metrics(), wait_fraction=2)


@pytest.mark.parametrize("adaptive", [True, False])
def test_server_batches_staggered_clients_together(adaptive: bool) -> None:
    """Through a real server: 4 client threads posting 10 ms apart, 3 rounds, a 300 ms mock
    (adaptive cap: a quarter of that, 75 ms).
    The default server gathers the later rounds into one backend call each;
    ``--max-batch-window-ms 0`` (the fixed 5 ms window) does not."""
    import threading
    import time

    import httpx

    from evolve_envs.reward.clients.endpoint_pool import EndpointPool
    from evolve_envs.reward.clients.progress_client import ProgressClient
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    extra = [] if adaptive else ["--max-batch-window-ms", "0"]
    frames = [np.full((32, 32, 3), paint_level(p), np.uint8) for p in (10, 40)]
    with EmbeddedService("mock", {"latency_ms": 300}, extra_args=extra) as svc:
        pool = EndpointPool([svc.url], timeout=30, max_retries=0)
        client = ProgressClient(pool, fail_on_request_error=True, max_workers=1)
        try:
            client.pairwise_critic("t", *frames)  # warm-up: the call time is known from here
            results: list[float] = []

            def post(k: int) -> None:
                time.sleep(0.01 * k)
                results.append(client.pairwise_critic("t", *frames).value)

            for _ in range(3):
                threads = [threading.Thread(target=post, args=(k,)) for k in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                time.sleep(0.5)
            snap = httpx.get(svc.url + "/metrics", timeout=10).json()
        finally:
            client.close()
            pool.close()
    critic = snap["batches"]["by_kind"]["critic"]
    assert results == pytest.approx([mock_critic(10, 40)] * 12)
    rounds_calls = critic["count"] - 1  # without the warm-up call
    if adaptive:
        assert snap["max_batch_window_ms"] == 250
        assert rounds_calls <= 5  # the first round may split; the next two are one call each
    else:
        assert snap["max_batch_window_ms"] == 0
        assert rounds_calls >= 6  # every round split
