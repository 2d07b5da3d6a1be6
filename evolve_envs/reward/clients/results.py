"""Results of reward client calls (:class:`CallResult`) and the counters clients keep
(:class:`ClientStats`, thread-safe; wrappers surface ``stats.snapshot()``).

>>> import numpy as np
>>> from evolve_envs.reward.clients.progress_client import ProgressClient
>>> client = ProgressClient("http://127.0.0.1:9", warn_interval_s=3600)  # port 9 refuses
>>> frame = np.zeros((8, 8, 3), np.uint8)
>>> result = client.pairwise_critic("open the drawer", frame, frame)
>>> result.fallback, result.value, client.stats.snapshot()["fallbacks"]
(True, 0.0, 1)
>>> client.close()
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

__all__ = ["CallResult", "ClientStats", "SCORE_RANGE"]

#: The range a reward service's score may take (`/score` scores and pickle scores): unit scores,
#: percentages, critics and the published image scorers' scales all lie within it. A client
#: refuses a score outside it, or not finite, as an invalid response: a hostile or broken
#: service answering 1e308 would overflow the advantage normalisation of a training step.
SCORE_RANGE: tuple[float, float] = (-100.0, 100.0)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CallResult(Generic[T]):
    """Outcome of one client call: the answer, or the fallback when ``fallback`` is true.

    ``latency_s`` covers the whole call (retries, encoding); ``endpoint`` answered or failed last
    (``None``: none tried); ``attempts`` is 0 when no endpoint could be tried.
    """

    value: T
    ok: bool
    fallback: bool
    latency_s: float
    endpoint: str | None
    error: str | None = None
    attempts: int = 1


class ClientStats:
    """Thread-safe counters of one client or several (latencies: the last ``max_samples`` calls)."""

    def __init__(self, max_samples: int = 4096) -> None:
        self._lock = threading.Lock()
        self._latencies: collections.deque[float] = collections.deque(maxlen=max_samples)
        self.calls = 0
        self.ok = 0
        self.errors = 0
        self.fallbacks = 0
        self.retries = 0
        self.errors_by_kind: collections.Counter[str] = collections.Counter()
        self.last_error: str | None = None

    def record_call(
        self,
        *,
        latency_s: float,
        ok: bool,
        fallback: bool = False,
        retries: int = 0,
        error_kind: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record one finished call."""
        with self._lock:
            self.calls += 1
            self._latencies.append(float(latency_s))
            self.retries += max(0, int(retries))
            if ok:
                self.ok += 1
            else:
                self.errors += 1
                if error_kind:
                    self.errors_by_kind[error_kind] += 1
                if error:
                    self.last_error = error
            if fallback:
                self.fallbacks += 1

    def latency_percentiles(self, qs: tuple[float, ...] = (50, 90, 99)) -> dict[float, float]:
        """Latency percentiles in seconds over the kept samples (NaN when there are none)."""
        with self._lock:
            samples = np.fromiter(self._latencies, dtype=float)
        if samples.size == 0:
            return {q: float("nan") for q in qs}
        values = np.percentile(samples, qs)
        return {q: float(v) for q, v in zip(qs, values, strict=True)}

    def snapshot(self) -> dict[str, object]:
        """A plain dict of all counters and p50/p90/p99 latency, safe to log or put in ``info``."""
        pct = self.latency_percentiles((50, 90, 99))
        with self._lock:
            return {
                "calls": self.calls,
                "ok": self.ok,
                "errors": self.errors,
                "fallbacks": self.fallbacks,
                "retries": self.retries,
                "errors_by_kind": dict(self.errors_by_kind),
                "last_error": self.last_error,
                "latency_samples": len(self._latencies),
                "latency_p50_s": pct[50],
                "latency_p90_s": pct[90],
                "latency_p99_s": pct[99],
            }

    def reset(self) -> None:
        """Zero all counters and drop latency samples."""
        with self._lock:
            self._latencies.clear()
            self.calls = self.ok = self.errors = self.fallbacks = self.retries = 0
            self.errors_by_kind.clear()
            self.last_error = None
