"""Server metrics (thread-safe): request counts, errors, batch sizes, latency percentiles, as JSON
or Prometheus text; `MetricsMiddleware` records every request.

Example:
    >>> m = Metrics()
    >>> m.record_request("/done", 200, 0.012)
    >>> 'reward_requests_total{route="/done"} 1.0' in m.prometheus_text().decode()
    True
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["Metrics", "MetricsMiddleware", "PROMETHEUS_CONTENT_TYPE", "wants_prometheus"]

#: Content type of the text exposition format (version 0.0.4).
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def wants_prometheus(accept: str | None) -> bool:
    """True when an `Accept` header asks for Prometheus text or OpenMetrics (not JSON)."""
    text = (accept or "").lower()
    return "text/plain" in text or "openmetrics" in text


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]


class Metrics:
    """Counters and bounded latency windows (the last `window` requests per route)."""

    def __init__(self, window: int = 4096) -> None:
        self._lock = threading.Lock()
        self._started = time.time()
        self._window = window
        self._requests: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._status: Counter[str] = Counter()
        self._latency: dict[str, deque[float]] = {}
        self._batches: dict[str, Counter[int]] = {}
        self._dropped: dict[str, int] = {}
        self._malformed: dict[str, int] = {}
        self._in_flight = 0

    def request_started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def record_request(self, route: str, status: int, latency_s: float) -> None:
        """Count one finished request (`status` >= 400 counts as an error)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._requests[route] += 1
            self._status[str(status)] += 1
            if status >= 400:
                self._errors[route] += 1
            window = self._latency.setdefault(route, deque(maxlen=self._window))
            window.append(latency_s)

    def record_dropped(self, kind: str, items: int) -> None:
        """Count `items` of `kind` not computed because their caller disconnected."""
        with self._lock:
            self._dropped[kind] = self._dropped.get(kind, 0) + items

    def record_malformed(self, kind: str, items: int) -> None:
        """Count `items` of `kind` whose model answer broke its format (answered as errors)."""
        with self._lock:
            self._malformed[kind] = self._malformed.get(kind, 0) + items

    def record_batch(self, kind: str, size: int) -> None:
        """Count one backend call of `size` items (`kind`: critic, done, image, video)."""
        with self._lock:
            self._batches.setdefault(kind, Counter())[size] += 1

    def snapshot(self) -> dict[str, object]:
        """A JSON-ready view of all metrics."""
        with self._lock:
            latency = {}
            for route, window in self._latency.items():
                values = sorted(window)
                latency[route] = {
                    "count": len(values),
                    "p50": 1000 * _percentile(values, 50),
                    "p90": 1000 * _percentile(values, 90),
                    "p99": 1000 * _percentile(values, 99),
                    "max": 1000 * (values[-1] if values else 0.0),
                }
            all_sizes: Counter[int] = Counter()
            by_kind = {}
            for kind, hist in self._batches.items():
                all_sizes.update(hist)
                by_kind[kind] = {
                    "count": sum(hist.values()),
                    "items": sum(size * n for size, n in hist.items()),
                    "max_size": max(hist) if hist else 0,
                    "histogram": {str(size): n for size, n in sorted(hist.items())},
                }
            return {
                "uptime_s": time.time() - self._started,
                "in_flight": self._in_flight,
                "dropped_items": dict(self._dropped),
                "malformed_answers": dict(self._malformed),
                "requests": dict(self._requests),
                "requests_total": sum(self._requests.values()),
                "errors": dict(self._errors),
                "errors_total": sum(self._errors.values()),
                "status_codes": dict(self._status),
                "latency_ms": latency,
                "batches": {
                    "count": sum(all_sizes.values()),
                    "items": sum(size * n for size, n in all_sizes.items()),
                    "max_size": max(all_sizes) if all_sizes else 0,
                    "histogram": {str(size): n for size, n in sorted(all_sizes.items())},
                    "by_kind": by_kind,
                },
            }

    def prometheus_text(self) -> bytes:
        """All metrics in Prometheus' text exposition format."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector(self))
        return generate_latest(registry)


class MetricsMiddleware:
    """ASGI middleware: counts every request under its path if in `known_routes`, else `"other"`."""

    def __init__(self, app: ASGIApp, metrics: Metrics, known_routes: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.known_routes = known_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in self.known_routes else "other"
        status = 500
        start = time.perf_counter()
        self.metrics.request_started()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.record_request(route, status, time.perf_counter() - start)


class _SnapshotCollector:
    """Turns one :meth:`Metrics.snapshot` into Prometheus metric families at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self.metrics.snapshot()
        yield GaugeMetricFamily("reward_uptime_seconds", "Seconds since start", snap["uptime_s"])
        yield GaugeMetricFamily(
            "reward_requests_in_flight", "Requests being served", snap["in_flight"]
        )
        requests = CounterMetricFamily("reward_requests", "Finished requests", labels=["route"])
        for route, n in sorted(snap["requests"].items()):
            requests.add_metric([route], n)
        yield requests
        errors = CounterMetricFamily(
            "reward_request_errors", "Requests answered >= 400", labels=["route"]
        )
        for route, n in sorted(snap["errors"].items()):
            errors.add_metric([route], n)
        yield errors
        status = CounterMetricFamily("reward_responses", "Responses by status", labels=["status"])
        for code, n in sorted(snap["status_codes"].items()):
            status.add_metric([code], n)
        yield status
        latency = GaugeMetricFamily(
            "reward_request_latency_seconds",
            "Latency quantiles over the last requests of each route",
            labels=["route", "quantile"],
        )
        for route, lat in sorted(snap["latency_ms"].items()):
            for q, key in (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99")):
                latency.add_metric([route, q], lat[key] / 1000.0)
        yield latency
        sizes = HistogramMetricFamily(
            "reward_backend_batch_size", "Items per backend call", labels=["kind"]
        )
        for kind, info in sorted(snap["batches"]["by_kind"].items()):
            hist = {int(k): v for k, v in info["histogram"].items()}
            buckets = [
                (str(b), sum(n for size, n in hist.items() if size <= b)) for b in _BATCH_BUCKETS
            ]
            buckets.append(("+Inf", info["count"]))
            sizes.add_metric([kind], buckets, sum_value=info["items"])
        yield sizes
        dropped = CounterMetricFamily(
            "reward_dropped_items", "Items not computed: their caller had gone", labels=["kind"]
        )
        for kind, n in sorted(snap["dropped_items"].items()):
            dropped.add_metric([kind], n)
        yield dropped
        malformed = CounterMetricFamily(
            "reward_malformed_answers",
            "Model answers that broke their preset's format (answered 502)",
            labels=["kind"],
        )
        for kind, n in sorted(snap["malformed_answers"].items()):
            malformed.add_metric([kind], n)
        yield malformed
