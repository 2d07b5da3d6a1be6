"""CallResult, ClientStats and RewardServiceError: counters under threads, pickling, messages."""

from __future__ import annotations

import math
import pickle
import threading

import pytest

from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.failure_policy import FailurePolicy
from evolve_envs.reward.clients.results import CallResult, ClientStats


def test_stats_counters_are_exact_under_concurrent_updates():
    stats = ClientStats(max_samples=100_000)

    def worker(offset: int) -> None:
        for i in range(1000):
            ok = (i + offset) % 4 != 0
            stats.record_call(
                latency_s=0.001 * (i % 10), ok=ok, fallback=not ok, retries=i % 2,
                error_kind=None if ok else "timeout",
            )  # fmt: skip

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = stats.snapshot()
    assert snap["calls"] == 8000 and snap["ok"] == 6000 and snap["errors"] == 2000
    assert snap["fallbacks"] == 2000 and snap["retries"] == 4000
    assert snap["errors_by_kind"] == {"timeout": 2000} and snap["latency_samples"] == 8000
    assert snap["latency_p50_s"] == pytest.approx(0.0045, abs=0.0006)
    assert snap["latency_p99_s"] == pytest.approx(0.009)
    stats.reset()
    assert stats.snapshot()["calls"] == 0 and math.isnan(stats.snapshot()["latency_p50_s"])


def test_latency_samples_are_bounded():
    stats = ClientStats(max_samples=10)
    for i in range(100):
        stats.record_call(latency_s=float(i), ok=True)
    assert stats.snapshot()["latency_samples"] == 10
    assert stats.latency_percentiles((0,))[0] == 90.0


def test_error_message_names_endpoint_route_cause_and_survives_pickling():
    err = RewardServiceError(
        "http://127.0.0.1:8111", "/done", "HTTP 503 Service Unavailable: busy",
        kind=ErrorKind.HTTP_STATUS, status_code=503, attempts=3,
    )  # fmt: skip
    text = str(err)
    assert "http://127.0.0.1:8111/done" in text and "HTTP 503" in text and "3 attempts" in text
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.endpoint, copy.route, copy.cause) == (err.endpoint, err.route, err.cause)
    assert (copy.kind, copy.status_code, copy.attempts) == ("http_status", 503, 3)
    assert "<no endpoint>" in str(RewardServiceError(None, "/score", OSError("disk full")))


def test_call_result_is_immutable_and_picklable():
    result = CallResult(value=[1.0], ok=True, fallback=False, latency_s=0.1, endpoint="e")
    assert pickle.loads(pickle.dumps(result)) == result
    with pytest.raises(AttributeError):
        result.ok = False


def test_policy_passes_input_errors_through_in_both_modes():
    for strict in (False, True):
        policy = FailurePolicy(strict)

        def bad_input():
            raise ValueError("frame must be uint8")

        with pytest.raises(ValueError, match="uint8"):
            policy.run("/done", bad_input, None)
        assert policy.stats.snapshot()["calls"] == 0


def test_policy_fallback_factory_and_strict_raise():
    def failing():
        raise RewardServiceError("http://x:1", "/pickle", "boom", attempts=2)

    soft = FailurePolicy(False, warn_interval_s=3600)
    result = soft.run("/pickle", failing, lambda: [0.0, 0.0])
    assert result.value == [0.0, 0.0] and result.attempts == 2 and result.endpoint == "http://x:1"
    assert soft.stats.snapshot()["retries"] == 1
    with pytest.raises(RewardServiceError, match="boom"):
        FailurePolicy(True).run("/pickle", failing, None)


def test_retry_after_header_parsing():
    import httpx

    from evolve_envs.reward.clients.pool_call import retry_after_s

    assert retry_after_s(httpx.Response(429, headers={"Retry-After": "1.5"})) == 1.5
    assert retry_after_s(httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015"})) == 0
    assert retry_after_s(httpx.Response(503)) == 0.0
