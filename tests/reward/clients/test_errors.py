"""The pool over an injected httpx transport, and the typed error tree."""

from __future__ import annotations

import pickle
import time

import httpx
import pytest
import stamina

from evolve_envs.reward.clients import (
    BadResponseError,
    EndpointPool,
    ProgressClient,
    RequestRejectedError,
    RewardServiceError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from evolve_envs.reward.clients.errors import ErrorKind


def test_failover_and_retries_over_a_mock_transport() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a.example":
            return httpx.Response(503, json={"error": "overloaded"})
        return httpx.Response(200, json={"critic": 12.5})

    pool = EndpointPool(
        ["http://a.example:1", "http://b.example:1"], transport=httpx.MockTransport(handler),
        selection="round_robin", backoff_s=0, max_retries=2,
    )  # fmt: skip
    with pool:
        for _ in range(3):
            r = pool.request("POST", "/pairwise-critic", json={})
            assert r.endpoint == "http://b.example:1" and r.response.json() == {"critic": 12.5}
    assert "a.example" in seen and seen.count("b.example") == 3


def test_a_client_falls_back_on_a_rejected_request_over_a_mock_transport() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(422, json={"error": "bad frame"}))
    with EndpointPool("http://svc.example:1", transport=transport, max_retries=0) as pool:
        client = ProgressClient(pool, fail_on_request_error=True)
        import numpy as np

        frame = np.zeros((8, 8, 3), np.uint8)
        with pytest.raises(RequestRejectedError) as info:
            client.pairwise_critic("t", frame, frame)
        assert info.value.status_code == 422 and "bad frame" in str(info.value)
        client.close()


@pytest.mark.parametrize(
    ("kind", "status", "branch"),
    [
        (ErrorKind.CONNECT, None, ServiceUnreachableError),
        (ErrorKind.NO_ENDPOINT, None, ServiceUnreachableError),
        (ErrorKind.CLOSED, None, ServiceUnreachableError),
        (ErrorKind.HTTP_STATUS, 503, ServiceUnreachableError),
        (ErrorKind.HTTP_STATUS, 429, ServiceUnreachableError),
        (ErrorKind.HTTP_STATUS, 401, RequestRejectedError),
        (ErrorKind.TIMEOUT, None, ServiceTimeoutError),
        (ErrorKind.INVALID_RESPONSE, None, BadResponseError),
        (ErrorKind.LOCAL_IO, None, RewardServiceError),
    ],
)
def test_error_tree(kind: str, status: int | None, branch: type) -> None:
    err = RewardServiceError("http://h:1", "/done", "cause", kind=kind, status_code=status)
    assert type(err) is branch and isinstance(err, RewardServiceError)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is branch and str(again) == str(err)


def test_a_dead_endpoint_raises_the_unreachable_branch() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with EndpointPool("http://dead.example:1", transport=httpx.MockTransport(refuse)) as pool:
        with pytest.raises(ServiceUnreachableError, match="connection refused"):
            pool.request("GET", "/health")


def _flaky(statuses: list[int], headers: dict[str, str] | None = None) -> httpx.MockTransport:
    """Answers ``statuses`` in order, then 200."""
    answers = iter(statuses)

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(answers, 200)
        return httpx.Response(status, json={"ok": status == 200}, headers=headers)

    return httpx.MockTransport(handler)


def test_retry_after_lengthens_the_backoff_on_the_same_endpoint() -> None:
    transport = _flaky([503], headers={"Retry-After": "0.3"})
    with EndpointPool("http://svc.example:1", transport=transport, backoff_s=0) as pool:
        start = time.monotonic()
        reply = pool.request("GET", "/capabilities")
        assert time.monotonic() - start >= 0.3 and reply.attempts == 2


def test_retries_stop_after_max_retries_and_name_the_last_failure() -> None:
    transport = _flaky([503] * 5)
    with EndpointPool("http://svc.example:1", transport=transport, backoff_s=0,
                      max_retries=2, failures_to_down=10) as pool:  # fmt: skip
        with pytest.raises(ServiceUnreachableError, match="HTTP 503") as info:
            pool.request("GET", "/capabilities")
    assert info.value.attempts == 3


def test_a_wait_past_the_call_budget_fails_at_once() -> None:
    transport = _flaky([503], headers={"Retry-After": "5"})
    with EndpointPool("http://svc.example:1", transport=transport, backoff_s=0,
                      total_timeout=1.0) as pool:  # fmt: skip
        start = time.monotonic()
        with pytest.raises(ServiceUnreachableError) as info:
            pool.request("GET", "/capabilities")
        assert time.monotonic() - start < 0.9 and info.value.attempts == 1


def test_retries_follow_stamina_switch() -> None:
    stamina.set_active(False)  # the process-wide switch stamina offers operators
    try:
        with EndpointPool("http://svc.example:1", transport=_flaky([503]), backoff_s=0) as pool:
            with pytest.raises(ServiceUnreachableError):
                pool.request("GET", "/capabilities")
    finally:
        stamina.set_active(True)
