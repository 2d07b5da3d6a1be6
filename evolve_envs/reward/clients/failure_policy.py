"""The failure policy every reward client shares: fail soft (warn + fallback) or fail fast.

Soft (``fail_on_request_error=False``, for long runs): a failed call gives the fallback value,
is counted, and is logged on ``evolve_envs.reward.clients`` at most once per ``warn_interval_s``
with the running counts. Fast: the ``RewardServiceError`` is raised. Invalid inputs raise
``ValueError``/``TypeError`` in both modes.

>>> policy = FailurePolicy(fail_on_request_error=False, name="progress client")
>>> result = policy.run("/pairwise-critic", lambda: (12.0, "http://127.0.0.1:8111", 1), 0.0)
>>> result.value, result.ok, result.endpoint
(12.0, True, 'http://127.0.0.1:8111')
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.results import CallResult, ClientStats

__all__ = ["FailurePolicy", "logger"]

logger = logging.getLogger("evolve_envs.reward.clients")

T = TypeVar("T")


class FailurePolicy:
    """Turns a call that may raise :class:`RewardServiceError` into a :class:`CallResult`."""

    def __init__(
        self,
        fail_on_request_error: bool = False,
        *,
        stats: ClientStats | None = None,
        name: str = "reward client",
        warn_interval_s: float = 60.0,
    ) -> None:
        self.fail_on_request_error = bool(fail_on_request_error)
        self.stats = stats if stats is not None else ClientStats()
        self.name = name
        self.warn_interval_s = float(warn_interval_s)
        self._lock = threading.Lock()
        self._last_warning: float | None = None
        self._suppressed = 0

    def run(
        self,
        route: str,
        call: Callable[[], tuple[T, str, int]],
        fallback: T | Callable[[], T],
    ) -> CallResult[T]:
        """Run ``call`` -> ``(value, endpoint, attempts)`` and apply the policy to its failure.

        ``fallback`` is the value (or a zero-argument factory) returned on failure in soft mode.
        """
        start = time.monotonic()
        try:
            value, endpoint, attempts = call()
        except RewardServiceError as err:
            latency = time.monotonic() - start
            soft = not self.fail_on_request_error
            self.stats.record_call(
                latency_s=latency,
                ok=False,
                fallback=soft,
                retries=max(0, err.attempts - 1),
                error_kind=err.kind,
                error=str(err),
            )
            if not soft:
                raise
            self._warn(err)
            value = fallback() if callable(fallback) else fallback
            return CallResult(
                value=value,
                ok=False,
                fallback=True,
                latency_s=latency,
                endpoint=err.endpoint,
                error=str(err),
                attempts=err.attempts,
            )
        latency = time.monotonic() - start
        self.stats.record_call(latency_s=latency, ok=True, retries=max(0, attempts - 1))
        return CallResult(
            value=value,
            ok=True,
            fallback=False,
            latency_s=latency,
            endpoint=endpoint,
            error=None,
            attempts=attempts,
        )

    def _warn(self, err: RewardServiceError) -> None:
        now = time.monotonic()
        with self._lock:
            due = self._last_warning is None or now - self._last_warning >= self.warn_interval_s
            if not due:
                self._suppressed += 1
                return
            suppressed, self._suppressed = self._suppressed, 0
            self._last_warning = now
        extra = (
            f"; {suppressed} more failures in the last {self.warn_interval_s:.0f} s not logged"
            if suppressed
            else ""
        )
        stats = self.stats
        logger.warning(
            "%s: %s; using the fallback value (so far: %d calls, %d failures, %d fallbacks%s)",
            self.name,
            err,
            stats.calls,
            stats.errors,
            stats.fallbacks,
            extra,
        )
