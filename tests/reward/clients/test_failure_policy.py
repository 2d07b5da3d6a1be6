"""Failure policy under injected faults, over real HTTP.

Each fault kind is tried in fail-soft mode (the call returns the fallback, counters move, no
exception) and in fail-fast mode (``RewardServiceError`` naming endpoint, route and cause).
Faults come from the server's fault admin API or from real process control.
"""

from __future__ import annotations

import logging

import pytest

from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.progress_client import DoneResult, ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.reward.clients.client_helpers import (
    arm_fault,
    fault_status,
    free_port,
    paint,
    server_metrics,
    within_guard,
)

FALLBACK = -7.5

# kind -> (fault spec, words expected in the error's cause, error kind)
FAULTS = {
    "http_500": ({"mode": "status", "status": 500}, "HTTP 500", ErrorKind.HTTP_STATUS),
    "http_503": ({"mode": "status", "status": 503}, "HTTP 503", ErrorKind.HTTP_STATUS),
    "http_429": ({"mode": "status", "status": 429}, "HTTP 429", ErrorKind.HTTP_STATUS),
    "timeout": ({"mode": "delay", "delay_s": 4.0}, "timeout", ErrorKind.TIMEOUT),
    "invalid_json": ({"mode": "invalid_json"}, "not JSON", ErrorKind.INVALID_RESPONSE),
    "wrong_length": ({"mode": "wrong_length"}, "critic", ErrorKind.INVALID_RESPONSE),
    "nan": ({"mode": "nan"}, "finite", ErrorKind.INVALID_RESPONSE),
    "inf": ({"mode": "inf"}, "finite", ErrorKind.INVALID_RESPONSE),
    "reset": ({"mode": "reset"}, "Error", ErrorKind.CONNECT),
}


def _client(pool, strict: bool) -> ProgressClient:
    return ProgressClient(pool, fail_on_request_error=strict, fallback_critic=FALLBACK)


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_in_fallback_mode_returns_the_fallback(kind, server_a, make_pool):
    spec, words, error_kind = FAULTS[kind]
    arm_fault(server_a, **spec)
    client = _client(make_pool(server_a.url, timeout=1.0), strict=False)
    result = within_guard(lambda: client.pairwise_critic("t", paint(0), paint(40)))
    assert not result.ok and result.fallback
    assert result.value == FALLBACK
    assert server_a.url in result.error and "/pairwise-critic" in result.error
    assert words in result.error
    snap = client.stats.snapshot()
    assert snap["errors"] == 1 and snap["fallbacks"] == 1
    assert snap["errors_by_kind"] == {error_kind: 1}
    client.close()


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_in_strict_mode_raises_a_named_error(kind, server_a, make_pool):
    spec, words, error_kind = FAULTS[kind]
    arm_fault(server_a, **spec)
    client = _client(make_pool(server_a.url, timeout=1.0), strict=True)
    with pytest.raises(RewardServiceError) as info:
        within_guard(lambda: client.pairwise_critic("t", paint(0), paint(40)))
    err = info.value
    assert err.endpoint == server_a.url and err.route == "/pairwise-critic"
    assert err.kind == error_kind
    message = str(err)
    assert server_a.url in message and "/pairwise-critic" in message and words in message
    assert client.stats.snapshot()["errors"] == 1
    assert client.stats.snapshot()["fallbacks"] == 0
    client.close()


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("wrong_length", "value_list"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("invalid_json", "not JSON"),
    ],
)
def test_trajectory_and_done_payload_faults_fall_back(mode, words, server_a, make_pool):
    arm_fault(server_a, mode=mode)
    client = _client(make_pool(server_a.url), strict=False)
    frames = [paint(p) for p in (0, 20, 40)]
    trajectory = within_guard(lambda: client.trajectory_values("t", frames, skip=1))
    done = within_guard(lambda: client.done("t", paint(0), paint(90), paint(99)))
    assert trajectory.fallback and trajectory.value is None and words in trajectory.error
    assert "/trajectory-critic" in trajectory.error
    assert done.fallback and done.value == DoneResult(done=False, prob=None)
    assert "/done" in done.error
    assert client.stats.snapshot()["fallbacks"] == 2
    client.close()


def test_no_server_at_start(make_pool):
    url = f"http://127.0.0.1:{free_port()}"
    soft = _client(make_pool(url), strict=False)
    results = [within_guard(lambda: soft.pairwise_critic("t", paint(0), paint(40)))]
    results += [within_guard(lambda: soft.pairwise_critic("t", paint(0), paint(40)))]
    assert all(r.fallback and r.value == FALLBACK for r in results)
    assert "Connect" in results[0].error and url in results[0].error
    # the refused endpoint is marked down: the second call fails at once without a request
    assert "marked down" in results[1].error and results[1].attempts == 0
    assert soft.stats.snapshot()["fallbacks"] == 2

    strict = _client(make_pool(url), strict=True)
    with pytest.raises(RewardServiceError, match="ConnectError") as info:
        within_guard(lambda: strict.done("t", paint(0), paint(0), paint(0)))
    assert info.value.endpoint == url and info.value.route == "/done"


def test_server_killed_mid_run(make_pool):
    service = EmbeddedService("mock").start()
    try:
        url = service.url
        soft = _client(make_pool(url), strict=False)
        strict = _client(make_pool(url), strict=True)
        before = [soft.pairwise_critic("t", paint(0), paint(p)) for p in (10, 20, 30)]
        assert strict.pairwise_critic("t", paint(0), paint(50)).value == pytest.approx(50)
        service.kill()
        after = [
            within_guard(lambda: soft.pairwise_critic("t", paint(0), paint(40))) for _ in range(5)
        ]
        with pytest.raises(RewardServiceError) as info:
            within_guard(lambda: strict.pairwise_critic("t", paint(0), paint(40)))
    finally:
        service.stop()
    assert [r.value for r in before] == pytest.approx([10, 20, 30])
    assert all(r.fallback and r.value == FALLBACK for r in after)
    assert soft.stats.snapshot()["fallbacks"] == 5 and soft.stats.snapshot()["ok"] == 3
    assert info.value.endpoint == url and url in str(info.value)
    assert info.value.kind in (ErrorKind.CONNECT, ErrorKind.NO_ENDPOINT)


def test_client_error_4xx_is_not_retried(server_a, make_pool):
    arm_fault(server_a, mode="status", status=404)
    client = _client(make_pool(server_a.url, max_retries=3), strict=True)
    with pytest.raises(RewardServiceError, match="HTTP 404") as info:
        client.pairwise_critic("t", paint(0), paint(40))
    assert info.value.status_code == 404 and info.value.attempts == 1
    injected = fault_status(server_a)["injected"]
    with pytest.raises(RewardServiceError):
        client.pairwise_critic("t", paint(0), paint(40))
    assert fault_status(server_a)["injected"] == injected + 1  # exactly one request reached it
    assert client.stats.snapshot()["retries"] == 0


def test_real_422_from_the_server_is_not_retried(server_b, make_pool):
    pool = make_pool(server_b.url, max_retries=3)
    before = server_metrics(server_b)["requests"].get("/done", 0)
    with pytest.raises(RewardServiceError) as info:
        pool.request("POST", "/done", json={"task": "missing frames"})
    after = server_metrics(server_b)["requests"].get("/done", 0)
    assert info.value.status_code == 422 and info.value.attempts == 1
    assert info.value.route == "/done" and server_b.url in str(info.value)
    assert after - before == 1
    # the endpoint is not blamed for the caller's bad request
    assert pool.endpoint_stats()[0]["up"] and pool.endpoint_stats()[0]["failures"] == 0


def test_transient_503_is_retried_on_the_same_endpoint(server_a, make_pool):
    start = fault_status(server_a)["injected"]
    arm_fault(server_a, mode="status", status=503, count=1)
    client = _client(make_pool(server_a.url, max_retries=2), strict=True)
    result = client.pairwise_critic("t", paint(0), paint(30))
    assert result.ok and result.value == pytest.approx(30) and result.attempts == 2
    assert fault_status(server_a)["injected"] == start + 1
    assert client.stats.snapshot()["retries"] == 1


def test_persistent_503_uses_all_retries_then_falls_back(server_a, make_pool):
    start = fault_status(server_a)["injected"]
    arm_fault(server_a, mode="status", status=503)
    client = _client(make_pool(server_a.url, max_retries=2, failures_to_down=10), strict=False)
    result = client.pairwise_critic("t", paint(0), paint(30))
    assert result.fallback and result.attempts == 3
    assert fault_status(server_a)["injected"] == start + 3
    assert client.stats.snapshot()["retries"] == 2


def test_failure_warnings_are_rate_limited(caplog, make_pool):
    url = f"http://127.0.0.1:{free_port()}"
    client = ProgressClient(make_pool(url), warn_interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="evolve_envs.reward.clients"):
        for _ in range(20):
            assert client.pairwise_critic("t", paint(0), paint(1)).fallback
    warnings = [r for r in caplog.records if r.name == "evolve_envs.reward.clients"]
    assert len(warnings) == 1
    assert url in warnings[0].getMessage() and "fallback" in warnings[0].getMessage()
    assert client.stats.snapshot()["fallbacks"] == 20

    caplog.clear()
    chatty = ProgressClient(make_pool(url), warn_interval_s=0)
    with caplog.at_level(logging.WARNING, logger="evolve_envs.reward.clients"):
        for _ in range(3):
            chatty.pairwise_critic("t", paint(0), paint(1))
    assert len([r for r in caplog.records if r.name == "evolve_envs.reward.clients"]) == 3
    assert "not logged" not in caplog.records[-1].getMessage()


def test_an_error_rebuilt_from_itself_keeps_its_fields() -> None:
    # Gymnasium's AsyncVectorEnv re-raises a worker's error as `type(err)(err)`
    from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError

    err = RewardServiceError("http://h:1", "/done", "refused", kind=ErrorKind.CONNECT, attempts=3)
    copy = type(err)(err)
    assert type(copy) is type(err) and str(copy) == str(err)
    assert (copy.endpoint, copy.route, copy.cause, copy.kind, copy.attempts) == (
        "http://h:1",
        "/done",
        "refused",
        ErrorKind.CONNECT,
        3,
    )
