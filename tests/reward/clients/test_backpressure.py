"""Backpressure, not failure: a busy service makes callers wait; only a dead one is marked down.

Over ``httpx.MockTransport`` (exact counts) and a real uvicorn server with a low admission limit.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import ServiceTimeoutError, ServiceUnreachableError
from evolve_envs.reward.clients.failover_transport import (
    DEADLINE,
    FailoverTransport,
    is_overload,
)


def _client(transport: FailoverTransport) -> httpx.Client:
    return httpx.Client(base_url="http://placeholder", transport=transport)


@pytest.mark.parametrize(
    ("status", "headers", "overload"),
    [
        (429, {}, True),
        (429, {"Retry-After": "2"}, True),
        (503, {"Retry-After": "1"}, True),
        (503, {}, False),  # a 503 without Retry-After is a failure
        (500, {"Retry-After": "1"}, False),
        (502, {}, False),
        (200, {}, False),
    ],
)
def test_an_overload_answer_is_429_or_a_503_with_retry_after(
    status: int, headers: dict[str, str], overload: bool
) -> None:
    assert is_overload(httpx.Response(status, headers=headers)) is overload


@pytest.mark.parametrize("status", [429, 503])
def test_overload_answers_never_mark_an_endpoint_down_but_shrink_its_window(status: int) -> None:
    busy = httpx.MockTransport(lambda r: httpx.Response(status, headers={"Retry-After": "1"}))
    transport = FailoverTransport(
        ["http://a.example:1"], transport=busy, failures_to_down=2, max_in_flight=16
    )
    with _client(transport) as client:
        for _ in range(20):
            assert client.get("/x").status_code == status
    (a,) = transport.endpoint_stats()
    assert a["up"] and a["failures"] == 0 and a["consecutive_failures"] == 0
    assert a["overloads"] == 20 and a["window"] == 1  # 16 -> 8 -> 4 -> 2 -> 1, and stays at 1


def test_the_window_grows_back_by_one_per_window_of_successes() -> None:
    answers = iter([503, 503] + [200] * 100)
    transport = FailoverTransport(
        ["http://a.example:1"],
        transport=httpx.MockTransport(
            lambda r: httpx.Response(next(answers), headers={"Retry-After": "0"})
        ),
        max_in_flight=8,
    )
    with _client(transport) as client:
        client.get("/x")
        client.get("/x")
        assert transport.endpoint_stats()[0]["window"] == 2
        for _ in range(5):  # 2 + 1/2 + 1/2.5 + ... : past 3 after 5 successes
            client.get("/x")
    assert transport.endpoint_stats()[0]["window"] == 3


def test_refused_connections_timeouts_and_resets_still_mark_down() -> None:
    errors = {
        "a.example": httpx.ConnectError("connection refused"),
        "b.example": httpx.ReadTimeout("timed out"),
        "c.example": httpx.RemoteProtocolError("peer closed connection"),
    }

    def handler(request: httpx.Request) -> httpx.Response:
        raise errors[request.url.host]

    urls = [f"http://{host}:1" for host in errors]
    for url in urls:
        transport = FailoverTransport(
            [url], transport=httpx.MockTransport(handler), failures_to_down=2, probe_interval_s=600
        )
        with _client(transport) as client:
            for _ in range(2):
                with pytest.raises(httpx.TransportError):
                    client.get("/x")
        assert transport.healthy_urls() == [], url
        transport.close()


def test_in_flight_requests_never_exceed_the_limit_and_the_rest_queue() -> None:
    limit, callers = 3, 24
    lock = threading.Lock()
    now = peak = 0

    def slow(request: httpx.Request) -> httpx.Response:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(0.02)
        with lock:
            now -= 1
        return httpx.Response(200)

    transport = FailoverTransport(
        ["http://a.example:1"], transport=httpx.MockTransport(slow), max_in_flight=limit
    )
    with _client(transport) as client, ThreadPoolExecutor(callers) as pool:
        codes = list(pool.map(lambda _: client.get("/x").status_code, range(callers * 4)))
    assert codes == [200] * (callers * 4)
    assert peak == limit
    queue = transport.queue_stats()
    assert queue["queued"] > 0 and queue["queue_wait_s"] > 0
    (a,) = transport.endpoint_stats()
    assert a["in_flight"] == 0 and a["successes"] == callers * 4


def test_a_request_that_finds_no_slot_before_its_deadline_times_out_without_blame() -> None:
    release = threading.Event()

    def held(request: httpx.Request) -> httpx.Response:
        release.wait(5)
        return httpx.Response(200)

    transport = FailoverTransport(
        ["http://a.example:1"], transport=httpx.MockTransport(held), max_in_flight=1
    )
    with _client(transport) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.get, "/x")
        time.sleep(0.1)  # the one slot is taken
        request = client.build_request("GET", "/x", extensions={DEADLINE: time.monotonic() + 0.2})
        with pytest.raises(httpx.PoolTimeout, match="no free request slot"):
            client.send(request)
        release.set()
        assert first.result().status_code == 200
    (a,) = transport.endpoint_stats()
    assert a["up"] and a["failures"] == 0 and transport.queue_stats()["queued"] == 1


def _answers(sequence: list[int], retry_after: str | None = "0") -> httpx.MockTransport:
    statuses = iter(sequence)

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses, 200)
        headers = {} if retry_after is None or status == 200 else {"Retry-After": retry_after}
        return httpx.Response(status, json={"ok": status == 200}, headers=headers)

    return httpx.MockTransport(handler)


def test_overload_answers_are_waited_out_past_max_retries() -> None:
    transport = _answers([503, 429] * 5)  # ten overload answers, then 200
    with EndpointPool(
        "http://svc.example:1", transport=transport, backoff_s=0.001, max_retries=1
    ) as pool:
        reply = pool.request("GET", "/capabilities")
        assert reply.response.json() == {"ok": True} and reply.attempts == 11
        assert pool.healthy_urls() == ["http://svc.example:1"]


def test_failures_other_than_overload_still_stop_at_max_retries() -> None:
    transport = _answers([503] * 5, retry_after=None)  # no Retry-After: a failing service
    with EndpointPool(
        "http://svc.example:1",
        transport=transport,
        backoff_s=0.001,
        max_retries=1,
        failures_to_down=10,
    ) as pool:
        with pytest.raises(ServiceUnreachableError, match="HTTP 503") as info:
            pool.request("GET", "/capabilities")
    assert info.value.attempts == 2


def test_an_overloaded_service_still_ends_within_the_call_budget() -> None:
    transport = _answers([503] * 10_000, retry_after="0.05")
    with EndpointPool(
        "http://svc.example:1", transport=transport, backoff_s=0.001, total_timeout=0.5
    ) as pool:
        start = time.monotonic()
        with pytest.raises((ServiceUnreachableError, ServiceTimeoutError)):
            pool.request("GET", "/capabilities")
        assert time.monotonic() - start < 2.0
        assert pool.healthy_urls() == ["http://svc.example:1"]
