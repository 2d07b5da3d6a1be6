"""One EndpointPool call: its deadline, retries and backoff, and the reply it returns.

A call knows its deadline and the endpoints it tried; it decides what is retried and how long to
wait before the next attempt (the backoff hook stamina asks).
:meth:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool.request` makes one
:class:`PoolCall` per request and runs its attempts under :func:`stamina.retry_context`.

Example:
    >>> import httpx
    >>> retry_after_s(httpx.Response(429, headers={"Retry-After": "1.5"}))
    1.5
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.failover_transport import ENDPOINT, FailoverTransport, is_overload

__all__ = ["PoolCall", "PoolResponse", "retry_after_s"]


def retry_after_s(response: httpx.Response) -> float:
    """Seconds from a numeric ``Retry-After`` header (0 when absent or not a number)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0


@dataclass(frozen=True, slots=True)
class PoolResponse:
    """A successful (2xx) reply: the httpx response, who answered, after how many attempts."""

    response: httpx.Response
    endpoint: str
    attempts: int
    latency_s: float


def _retryable(error: RewardServiceError) -> bool:
    """Worth another attempt: connect errors, resets, timeouts, HTTP 429 and 5xx."""
    if error.kind in (ErrorKind.CONNECT, ErrorKind.TIMEOUT):
        return True
    status = error.status_code
    return (
        error.kind == ErrorKind.HTTP_STATUS
        and status is not None
        and (status == 429 or status >= 500)
    )


class PoolCall:
    """One :meth:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool.request`: the endpoints
    it tried, its deadline, the last ``Retry-After``, and (:meth:`backoff`) stamina's decision to
    retry and how long to wait.

    ``failover`` is the pool's transport (which endpoints are up, which this call has not
    tried); ``backoff_s`` and ``max_backoff_s`` are the pool's backoff settings; ``max_retries``
    the failures after the first that it retries. An overload answer (429, or 503 with
    ``Retry-After``) is waited out and retried within the call budget without using up a retry:
    a busy service is backpressure, not a failure.

    Example:
        >>> import httpx
        >>> from evolve_envs.reward.clients.failover_transport import FailoverTransport
        >>> with FailoverTransport(["http://127.0.0.1:8111"]) as failover:
        ...     call = PoolCall("GET", "/health", 30.0, 60.0, str, {}, failover=failover,
        ...                     backoff_s=0.25, max_backoff_s=5.0)
        ...     refused = RewardServiceError("http://127.0.0.1:8111", "/health", "bad request",
        ...                                  kind=ErrorKind.HTTP_STATUS, status_code=400)
        ...     call.backoff(refused)  # a 4xx other than 429 is not retried
        False
    """

    __slots__ = (
        "method",
        "route",
        "attempt_timeout",
        "budget",
        "deadline",
        "start",
        "describe",
        "body",
        "failover",
        "backoff_s",
        "max_backoff_s",
        "tried",
        "retry_after",
        "last_error",
        "max_retries",
        "failures",
        "overloads",
        "overloaded",
    )

    def __init__(
        self,
        method: str,
        route: str,
        attempt_timeout: float,
        budget: float,
        describe: Callable[[httpx.Response], str],
        body: dict[str, object],
        *,
        failover: FailoverTransport,
        backoff_s: float,
        max_backoff_s: float,
        max_retries: int = 2,
    ) -> None:
        self.method = method
        self.route = route
        self.attempt_timeout = attempt_timeout
        self.budget = budget
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.describe = describe
        self.body = body
        self.failover = failover
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.tried: set[str] = set()
        self.retry_after = 0.0  # from a 429/503 answer's Retry-After header (seconds)
        self.last_error: RewardServiceError | None = None
        self.max_retries = max_retries
        self.failures = 0  # failed attempts that count against max_retries
        self.overloads = 0  # overload answers waited out (they do not)
        self.overloaded = False  # the last attempt's answer was an overload answer

    def answered_error(
        self, request: httpx.Request, response: httpx.Response, num: int
    ) -> RewardServiceError:
        """The error of attempt ``num`` that got the non-2xx ``response``; an overload answer
        notes its ``Retry-After`` and is waited out, not counted as a failure."""
        self.overloaded = is_overload(response)
        if self.overloaded or response.status_code >= 500:
            self.retry_after = retry_after_s(response)
        return self.failed(
            request, self.describe(response), ErrorKind.HTTP_STATUS, num, response.status_code
        )

    def failed(
        self,
        request: httpx.Request,
        cause: str | BaseException,
        kind: str,
        num: int,
        status_code: int | None = None,
    ) -> RewardServiceError:
        """The error of attempt ``num``, naming the endpoint the transport chose; remembered as
        this call's last error, and the endpoint as tried."""
        endpoint = request.extensions.get(ENDPOINT)
        error = RewardServiceError(
            endpoint, self.route, cause, kind=kind, status_code=status_code, attempts=num
        )
        if endpoint is not None:
            self.tried.add(endpoint)
        self.last_error = error
        return error

    def budget_spent_overloaded(self, request: httpx.Request, num: int) -> RewardServiceError:
        """The error of attempt ``num`` cut short by the call budget after the service answered
        overload: it names the overload answer (kind and status), which is what went wrong."""
        last = self.last_error
        assert last is not None
        cause = (
            f"{last.cause}; the service answered overload {self.overloads} times and the call "
            f"budget of {self.budget:.3g} s ran out waiting (reward_model.call_budget_s; size "
            "the service with admission_for or lower reward_model.max_in_flight)"
        )
        return self.failed(request, cause, last.kind, num, last.status_code)

    def backoff(self, exc: Exception) -> bool | float:
        """stamina's backoff hook: ``False`` to give up now, else the seconds to wait.

        Moving to an untried endpoint happens at once; when every usable endpoint already failed
        this call, the wait doubles from ``backoff_s`` (jittered to 50-100 %, capped by
        ``max_backoff_s``) and a ``Retry-After`` lengthens it up to that cap. An overload answer
        is retried until the call budget is spent; any other failure at most ``max_retries``
        times. No endpoint up, or a wait that would end past the call budget: fail now.
        """
        if not isinstance(exc, RewardServiceError) or not _retryable(exc):
            return False
        overloaded = exc is self.last_error and self.overloaded
        self.overloaded = False
        if overloaded:
            self.overloads += 1
            streak = self.overloads
        else:
            self.failures += 1
            if self.failures > self.max_retries:
                return False
            streak = self.failures
        if time.monotonic() >= self.deadline:
            return False  # the call budget is spent: no further attempt, on any endpoint
        if not self.failover.healthy_urls():
            return False  # nothing left to try: fail now instead of sleeping
        if self.failover.has_fresh(self.tried):
            return 0.0
        wait = min(self.max_backoff_s, self.backoff_s * 2 ** (streak - 1))
        wait *= 0.5 + random.random() / 2
        wait = max(wait, min(self.retry_after, self.max_backoff_s))
        if time.monotonic() + wait >= self.deadline:
            return False  # no attempt may start after the call budget
        return wait
