"""EndpointPool over real servers: failover, selection, re-probing, concurrency under load."""

from __future__ import annotations

import threading
import time

import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.reward.clients.client_helpers import (
    arm_fault,
    fault_status,
    free_port,
    paint,
    server_metrics,
    within_guard,
)


def _wait_for(predicate, what: str, seconds: float = 30.0) -> None:
    """Poll ``predicate`` (hang guard, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {seconds:.0f} s")
        time.sleep(0.05)


def test_retry_moves_to_the_healthy_endpoint_and_does_not_hammer_the_dead_one(server_a, make_pool):
    dead = f"http://127.0.0.1:{free_port()}"
    pool = make_pool([dead, server_a.url], probe_interval_s=600)
    client = ProgressClient(pool, fail_on_request_error=True)
    results = [
        within_guard(lambda p=p: client.pairwise_critic("t", paint(0), paint(p))) for p in range(10)
    ]
    assert [r.value for r in results] == pytest.approx(list(range(10)))
    assert all(r.ok and r.endpoint == server_a.url for r in results)
    assert max(r.attempts for r in results) == 2  # the call that found the dead endpoint
    stats = {s["url"]: s for s in pool.endpoint_stats()}
    assert stats[dead]["requests"] == 1 and not stats[dead]["up"]
    assert stats[server_a.url]["successes"] == 10
    assert client.stats.snapshot()["retries"] == 1


def test_failover_when_one_replica_answers_503(server_a, server_b, make_pool):
    arm_fault(server_a, mode="status", status=503)
    pool = make_pool([server_a.url, server_b.url], max_retries=2, probe_interval_s=600)
    client = ProgressClient(pool, fail_on_request_error=True)
    results = [client.pairwise_critic("t", paint(0), paint(p)) for p in range(12)]
    assert [r.value for r in results] == pytest.approx(list(range(12)))
    assert all(r.endpoint == server_b.url for r in results)
    a_stats = pool.endpoint_stats()[0]
    # three consecutive 503s mark it down; after that it gets no traffic
    assert a_stats["failures"] == 3 and not a_stats["up"]
    assert client.stats.snapshot()["retries"] == 3


def test_every_endpoint_down_fails_fast_with_all_endpoints_named(make_pool):
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    pool = make_pool(urls, probe_interval_s=600)
    with pytest.raises(RewardServiceError):
        pool.request("GET", "/capabilities")
    with pytest.raises(RewardServiceError, match="every endpoint is marked down") as info:
        pool.request("GET", "/capabilities")
    assert all(url in str(info.value) for url in urls) and info.value.attempts == 0


def test_down_endpoint_is_reprobed_and_used_again_when_it_comes_back(server_b, make_pool):
    service = EmbeddedService("mock").start()
    port = service.port
    replacement = None
    try:
        pool = make_pool([service.url, server_b.url], probe_interval_s=0.2)
        client = ProgressClient(pool)
        for p in range(4):
            assert client.pairwise_critic("t", paint(0), paint(p)).ok
        assert pool.endpoint_stats()[0]["successes"] == 2  # ties rotate: both replicas used
        service.kill()
        results = [client.pairwise_critic("t", paint(0), paint(p)) for p in range(6)]
        assert all(r.ok and r.endpoint == server_b.url for r in results)
        assert not pool.endpoint_stats()[0]["up"]
        _wait_for(lambda: pool.endpoint_stats()[0]["probes"] >= 2, "two failed probes")
        assert not pool.endpoint_stats()[0]["up"]

        replacement = EmbeddedService("mock", port=port).start()
        _wait_for(lambda: pool.endpoint_stats()[0]["up"], "the endpoint to be probed up")
        before = pool.endpoint_stats()[0]["successes"]
        results = [client.pairwise_critic("t", paint(0), paint(p)) for p in range(6)]
        assert all(r.ok for r in results)
        assert pool.endpoint_stats()[0]["successes"] - before == 3
        assert {r.endpoint for r in results} == {service.url, server_b.url}
    finally:
        service.stop()
        if replacement is not None:
            replacement.stop()


def _spread(pool: EndpointPool, requests_per_thread: int, threads: int) -> list[int]:
    client = ProgressClient(pool, fail_on_request_error=True)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(requests_per_thread):
                client.pairwise_critic("t", paint(0), paint(10))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors and not any(w.is_alive() for w in workers)
    return [s["requests"] for s in pool.endpoint_stats()]


def test_least_in_flight_sends_less_work_to_a_slow_replica_than_round_robin(
    server_a, server_b, make_pool
):
    arm_fault(server_a, mode="delay", delay_s=0.5, routes=["/pairwise-critic"])
    urls = [server_a.url, server_b.url]
    slow_rr, fast_rr = _spread(make_pool(urls, selection="round_robin"), 3, 6)
    slow_lif, fast_lif = _spread(make_pool(urls, selection="least_in_flight"), 3, 6)
    assert slow_rr == fast_rr == 9  # round robin ignores load
    assert slow_lif + fast_lif == 18
    assert slow_lif < fast_lif  # the slow replica holds requests in flight, so it gets fewer


def test_in_flight_counts_are_balanced_while_requests_wait(server_a, server_b, make_pool):
    arm_fault(server_a, mode="delay", delay_s=3.0, routes=["/pairwise-critic"])
    arm_fault(server_b, mode="delay", delay_s=3.0, routes=["/pairwise-critic"])
    pool = make_pool([server_a.url, server_b.url])
    client = ProgressClient(pool, max_workers=4)
    futures = [client.submit_pairwise_critic("t", paint(0), paint(5)) for _ in range(4)]
    _wait_for(lambda: sum(s["in_flight"] for s in pool.endpoint_stats()) == 4, "4 in flight")
    assert [s["in_flight"] for s in pool.endpoint_stats()] == [2, 2]
    assert [f.result(timeout=60).value for f in futures] == pytest.approx([5.0] * 4)
    assert [s["in_flight"] for s in pool.endpoint_stats()] == [0, 0]
    client.close()


@pytest.mark.parametrize("two_servers", [False, True])
def test_32_threads_share_one_pool_without_lost_or_mismatched_answers(
    two_servers, server_a, server_b, make_pool
):
    urls = [server_a.url, server_b.url] if two_servers else [server_a.url]
    totals_before = sum(server_metrics(s)["requests"].get("/done", 0) for s in (server_a, server_b))
    pool = make_pool(urls, timeout=60, max_connections=32)
    client = ProgressClient(pool, fail_on_request_error=True)
    threads, per_thread = 32, 8
    answers: dict[int, list[tuple[int, float, bool]]] = {}
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        mine = []
        try:
            for i in range(per_thread):
                p = (tid * per_thread + i) % 101
                critic = client.pairwise_critic(f"task {tid}", paint(0, (16, 16, 3)), paint(p))
                done = client.done("t", paint(0), paint(0), paint(p, (16, 16, 3)))
                mine.append((p, critic.value, done.value.done))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        answers[tid] = mine

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert not errors, errors[:3]
    assert not any(w.is_alive() for w in workers)
    flat = [item for tid in sorted(answers) for item in answers[tid]]
    assert len(flat) == threads * per_thread
    for p, critic, done in flat:
        assert critic == pytest.approx(p) and done == (p >= 95)
    snap = client.stats.snapshot()
    assert snap["calls"] == snap["ok"] == 2 * threads * per_thread and snap["errors"] == 0
    totals_after = sum(server_metrics(s)["requests"].get("/done", 0) for s in (server_a, server_b))
    assert totals_after - totals_before == threads * per_thread
    if two_servers:
        assert all(s["successes"] > 0 for s in pool.endpoint_stats())


def test_bearer_token_is_sent_and_a_401_is_not_retried(make_pool):
    with EmbeddedService("mock", token="s3cret") as service:
        good = ProgressClient(make_pool(service.url, token="s3cret"), fail_on_request_error=True)
        assert good.pairwise_critic("t", paint(0), paint(20)).value == pytest.approx(20)
        bad = ProgressClient(make_pool(service.url, max_retries=3), fail_on_request_error=True)
        with pytest.raises(RewardServiceError, match="HTTP 401") as info:
            bad.pairwise_critic("t", paint(0), paint(20))
        assert info.value.attempts == 1


def test_probe_reports_health_and_closed_pools_refuse_requests(server_a, make_pool):
    dead = f"http://127.0.0.1:{free_port()}"
    pool = make_pool([server_a.url, dead], probe_interval_s=600)
    assert pool.probe() == {server_a.url: True, dead: False}
    assert pool.healthy_urls() == [server_a.url]
    vlac_style = make_pool(server_a.url, health_route="/healthcheck")
    assert vlac_style.probe() == {server_a.url: True}
    pool.close()
    with pytest.raises(RewardServiceError, match="closed"):
        pool.request("GET", "/capabilities")


def test_no_attempt_starts_after_the_call_budget(server_a, make_pool) -> None:
    # Every answer is a 503; the backoff before the retry is longer than the whole budget.
    arm_fault(server_a, mode="status", status=503)
    pool = make_pool(server_a.url, max_retries=5, backoff_s=5.0, max_backoff_s=5.0,
                     total_timeout=0.5, failures_to_down=10)  # fmt: skip
    before = fault_status(server_a)["injected"]
    with pytest.raises(RewardServiceError) as err:
        pool.request("GET", "/capabilities")
    assert err.value.status_code == 503 and err.value.attempts == 1
    assert fault_status(server_a)["injected"] - before == 1  # the server saw one request
