"""EndpointPool: balanced, retrying, health-aware access to a set of reward service replicas.

The pool owns one ``httpx.Client`` on a
:class:`~evolve_envs.reward.clients.failover_transport.FailoverTransport` (keep-alive connections
are reused across calls and threads). The transport picks the endpoint of each attempt
(``"least_in_flight"`` by default, ties rotate, or ``"round_robin"``), marks endpoints down when
they refuse connections or fail ``failures_to_down`` times in a row, and re-probes them in the
background; an injected ``transport=`` (e.g. ``httpx.MockTransport``) sits below it. The pool adds,
per request:

* retries through :func:`stamina.retry_context` on connect errors, timeouts, connection resets,
  HTTP 429 and 5xx, moving to another endpoint when one is available (``max_retries`` extra
  attempts, bounded by a total time budget), with exponential backoff once every usable endpoint
  has failed the call; any other 4xx is the caller's fault and is *not* retried. stamina logs
  each scheduled retry on the ``stamina`` logger and counts it in Prometheus when
  ``prometheus_client`` is installed;
* fail-fast when every endpoint is down (no hammering, no waiting) until a probe succeeds;
* bounded answers: a call ends by its budget (``total_timeout``) however slowly an endpoint
  sends, and an answer over ``max_response_bytes`` once decompressed (16 MiB by default) is
  dropped unread as an invalid response (:mod:`evolve_envs.reward.clients.bounded_read`).

Failures raise :class:`~evolve_envs.reward.clients.errors.RewardServiceError` naming endpoint, route
and cause; the clients turn that into a fallback value or re-raise it, per their failure policy.

``VLAC_SERVICE_URL`` + ``VLAC_SERVICE_NUM`` expand to consecutive ports (see
:func:`expand_endpoints` and :func:`endpoints_from_env`).

Example: two replicas behind a stand-in transport; the first refuses connections, so the call
moves to the second and the first is marked down:

    >>> import httpx
    >>> def replicas(request):
    ...     if request.url.port == 8111:
    ...         raise httpx.ConnectError("connection refused", request=request)
    ...     return httpx.Response(200, json={"critic": 12.5})
    >>> urls = ["http://127.0.0.1:8111", "http://127.0.0.1:8112"]
    >>> with EndpointPool(urls, timeout=60, transport=httpx.MockTransport(replicas)) as pool:
    ...     reply = pool.request("POST", "/pairwise-critic", json={"task": "t"})
    ...     reply.response.json(), reply.endpoint, reply.attempts, pool.healthy_urls()
    ({'critic': 12.5}, 'http://127.0.0.1:8112', 2, ['http://127.0.0.1:8112'])
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import stamina

from evolve_envs.reward.clients.bounded_read import DEFAULT_MAX_RESPONSE_BYTES, ResponseRefused
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.failover_transport import (
    AVOID,
    DEADLINE,
    ENDPOINT,
    FailoverTransport,
    NoEndpointAvailable,
    Selection,
    describe_http_error,
)
from evolve_envs.reward.clients.model_watch import ModelWatch
from evolve_envs.reward.protocol.token import resolve_token

__all__ = [
    "EndpointPool",
    "PoolResponse",
    "expand_endpoints",
    "endpoints_from_env",
    "describe_http_error",
]

ENV_SERVICE_URL = "VLAC_SERVICE_URL"
ENV_SERVICE_NUM = "VLAC_SERVICE_NUM"
ENV_TOKEN = "EVOLVE_REWARD_TOKEN"
_PLACEHOLDER = "http://reward-service"  # base URL of requests before the transport picks one


# --------------------------------------------------------------------------- endpoint lists


def _normalize_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"endpoint must be a non-empty URL string, got {url!r}")
    text = url.strip()
    if "://" not in text:
        raise ValueError(f"endpoint {text!r} needs a scheme, e.g. 'http://{text}'")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"endpoint {text!r}: scheme must be http or https")
    if not parts.hostname:
        raise ValueError(f"endpoint {text!r} has no host")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ValueError(f"endpoint {text!r}: {exc}") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _consecutive_ports(base_url: str, count: int) -> list[str]:
    base = _normalize_url(base_url)
    if count < 1:
        raise ValueError(f"service count must be >= 1, got {count}")
    if count == 1:
        return [base]
    parts = urlsplit(base)
    if parts.port is None:
        raise ValueError(f"{base!r}: expanding to {count} services needs an explicit port")
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    urls = []
    for offset in range(count):
        port = parts.port + offset
        if port > 65535:
            raise ValueError(f"{base!r} + {count} services runs past port 65535")
        netloc = f"{userinfo}{host}:{port}"
        urls.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return urls


def expand_endpoints(
    endpoint_or_list: str | Sequence[str] | None,
    service_url: str | None = None,
    service_num: int | str | None = None,
) -> list[str]:
    """Resolve the endpoint list of a deployment.

    * ``service_url`` (``VLAC_SERVICE_URL``) given: it is the first of ``service_num``
      (``VLAC_SERVICE_NUM``, default 1) services on consecutive ports, and ``endpoint_or_list``
      is ignored: ``("…", "http://127.0.0.1:8111", 4)`` -> ports 8111, 8112, 8113, 8114.
    * otherwise ``endpoint_or_list`` is one URL, a comma-separated string or a list of URLs;
      ``service_num > 1`` with a single URL expands it the same way.

    URLs are normalised (no trailing slash) and de-duplicated in order. Raises ``ValueError`` on a
    malformed URL, a missing port when expanding, or nothing to resolve.

    Example:
        >>> expand_endpoints(None, "http://127.0.0.1:8111", 2)
        ['http://127.0.0.1:8111', 'http://127.0.0.1:8112']
        >>> expand_endpoints("http://a:1/, http://b:2, http://a:1")
        ['http://a:1', 'http://b:2']
    """
    count = _parse_count(service_num)
    if service_url:
        urls = _consecutive_ports(service_url, count or 1)
    else:
        if endpoint_or_list is None:
            raise ValueError("no reward service endpoint configured (endpoint or VLAC_SERVICE_URL)")
        if isinstance(endpoint_or_list, str):
            items = [item for item in (s.strip() for s in endpoint_or_list.split(",")) if item]
        else:
            items = [str(item).strip() for item in endpoint_or_list]
        if not items:
            raise ValueError("empty reward service endpoint list")
        if count is not None and count > 1:
            if len(items) != 1:
                raise ValueError(
                    f"service_num={count} expands one base URL, got {len(items)} endpoints"
                )
            urls = _consecutive_ports(items[0], count)
        else:
            urls = [_normalize_url(item) for item in items]
    return list(dict.fromkeys(urls))


def _parse_count(service_num: int | str | None) -> int | None:
    if service_num is None or (isinstance(service_num, str) and not service_num.strip()):
        return None
    try:
        count = int(service_num)
    except (TypeError, ValueError):
        raise ValueError(f"service count must be an integer, got {service_num!r}") from None
    if count < 1:
        raise ValueError(f"service count must be >= 1, got {count}")
    return count


def endpoints_from_env(
    endpoint_or_list: str | Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """:func:`expand_endpoints` with ``VLAC_SERVICE_URL`` / ``VLAC_SERVICE_NUM`` read from the
    environment (they override ``endpoint_or_list``, as environment variables override YAML).

    Example:
        >>> env = {"VLAC_SERVICE_URL": "http://127.0.0.1:8111", "VLAC_SERVICE_NUM": "3"}
        >>> endpoints_from_env("http://127.0.0.1:9000", environ=env)
        ['http://127.0.0.1:8111', 'http://127.0.0.1:8112', 'http://127.0.0.1:8113']
        >>> endpoints_from_env("http://127.0.0.1:9000", environ={})
        ['http://127.0.0.1:9000']
    """
    env = os.environ if environ is None else environ
    return expand_endpoints(
        endpoint_or_list, env.get(ENV_SERVICE_URL) or None, env.get(ENV_SERVICE_NUM) or None
    )


# --------------------------------------------------------------------------- pool


def _retry_after_s(response: httpx.Response) -> float:
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


class _Call:
    """One :meth:`EndpointPool.request`: the endpoints it tried, its deadline, the last
    ``Retry-After``, and (:meth:`backoff`) stamina's decision to retry and how long to wait."""

    __slots__ = (
        "pool", "method", "route", "attempt_timeout", "budget", "deadline", "start",
        "describe", "body", "tried", "retry_after", "last_error",
    )  # fmt: skip

    def __init__(
        self,
        pool: EndpointPool,
        method: str,
        route: str,
        attempt_timeout: float,
        budget: float,
        describe: Callable[[httpx.Response], str],
        body: dict[str, Any],
    ) -> None:
        self.pool = pool
        self.method = method
        self.route = route
        self.attempt_timeout = attempt_timeout
        self.budget = budget
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.describe = describe
        self.body = body
        self.tried: set[str] = set()
        self.retry_after = 0.0  # from a 429/503 answer's Retry-After header (seconds)
        self.last_error: RewardServiceError | None = None

    def attempt(self, num: int) -> PoolResponse:
        """Attempt ``num`` (1-based), on an endpoint this call has not tried while one is up."""
        pool = self.pool
        if pool.closed:
            raise RewardServiceError(
                ", ".join(pool.urls), self.route, "endpoint pool is closed", kind=ErrorKind.CLOSED
            )
        return pool._send(self, num)

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

    def backoff(self, exc: Exception) -> bool | float:
        """stamina's backoff hook: ``False`` to give up now, else the seconds to wait.

        Moving to an untried endpoint happens at once; when every usable endpoint already failed
        this call, the wait doubles from ``backoff_s`` (jittered to 50-100 %, capped by
        ``max_backoff_s``) and a ``Retry-After`` lengthens it up to that cap. No endpoint up, or
        a wait that would end past the call budget: fail now.
        """
        if not isinstance(exc, RewardServiceError) or not _retryable(exc):
            return False
        if time.monotonic() >= self.deadline:
            return False  # the call budget is spent: no further attempt, on any endpoint
        pool = self.pool
        if not pool.healthy_urls():
            return False  # nothing left to try: fail now instead of sleeping
        if pool._failover.has_fresh(self.tried):
            return 0.0
        wait = min(pool.max_backoff_s, pool.backoff_s * 2 ** (exc.attempts - 1))
        wait *= 0.5 + random.random() / 2
        wait = max(wait, min(self.retry_after, pool.max_backoff_s))
        if time.monotonic() + wait >= self.deadline:
            return False  # no attempt may start after the call budget
        return wait


class EndpointPool:
    """Balanced, retrying, health-aware access to one or more reward service replicas.

    Args:
        endpoints: one base URL, a comma-separated string, or a list (see
            :func:`expand_endpoints`).
        timeout: per-attempt read/write timeout in seconds (VLAC's default is 120).
        connect_timeout: per-attempt connect timeout in seconds.
        max_retries: extra attempts after the first one for retryable failures.
        backoff_s: first backoff before retrying an endpoint that already failed in this request
            (doubles each time, with jitter, capped by ``max_backoff_s``; a ``Retry-After``
            header lengthens it up to that cap). Moving to a different, untried endpoint
            happens without waiting.
        total_timeout: upper bound on one request, retries and backoff included: a total
            deadline, not a per-read timeout (every connect, write and read of an attempt is cut
            to what is left of it, so a server that answers a byte at a time cannot stretch a
            call past it). ``None`` means ``(timeout + connect_timeout) * (max_retries + 1) +
            max_backoff_s * max_retries`` (385 s with the defaults); ``make_env`` passes
            ``reward_model.call_budget_s``.
        max_response_bytes: the most bytes one answer may have once decoded (gzip/deflate are
            decompressed by the client, within this limit; 16 MiB by default). A larger answer
            is dropped unread and fails the call as an invalid response (not retried).
        token: bearer token sent as ``Authorization: Bearer <token>`` on every request and probe;
            ``None``: ``$EVOLVE_REWARD_TOKEN`` if set (the variable the server reads too), ``""``:
            no token.
        probe_interval_s: how long a down endpoint rests before the next health probe.
        probe_timeout_s: timeout of one health probe.
        health_route: first probe route; ``GET`` unless the route ends in ``healthcheck``
            (VLAC's ``POST /healthcheck``). ``GET /health`` and ``POST /healthcheck`` are the
            fallbacks when it is missing; a server with none is alive if it answers below 500.
        failures_to_down: consecutive 429/5xx/timeouts/resets that mark an endpoint down (a
            refused connection marks it down at once).
        selection: ``"least_in_flight"`` or ``"round_robin"``.
        max_connections: httpx connection pool size (keep-alive connections reused).
        trust_env: let httpx read proxy settings from the environment (off by default: cluster
            proxies usually cannot reach compute nodes).
        transport: the httpx transport requests go through (default: httpx's HTTP transport);
            tests and embedders pass ``httpx.MockTransport`` or their own.

    Example: a replica that is overloaded once (503) is retried after a short backoff.

        >>> import httpx
        >>> answers = iter([httpx.Response(503), httpx.Response(200, json={"backend": "mock"})])
        >>> service = httpx.MockTransport(lambda request: next(answers))
        >>> with EndpointPool("http://127.0.0.1:8111", timeout=30, max_retries=2,
        ...                   backoff_s=0.01, transport=service) as pool:
        ...     r = pool.request("GET", "/capabilities")
        ...     r.endpoint, r.response.json(), r.attempts
        ('http://127.0.0.1:8111', {'backend': 'mock'}, 2)
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        timeout: float = 120.0,
        connect_timeout: float = 5.0,
        max_retries: int = 2,
        backoff_s: float = 0.25,
        max_backoff_s: float = 5.0,
        total_timeout: float | None = None,
        token: str | None = None,
        probe_interval_s: float = 5.0,
        probe_timeout_s: float = 2.0,
        health_route: str = "/health",
        failures_to_down: int = 3,
        selection: Selection = "least_in_flight",
        max_connections: int = 64,
        trust_env: bool = False,
        transport: httpx.BaseTransport | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        urls = expand_endpoints(endpoints)
        for name, value in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("probe_interval_s", probe_interval_s),
            ("probe_timeout_s", probe_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if max_retries < 0 or backoff_s < 0 or max_backoff_s < 0 or failures_to_down < 1:
            raise ValueError(
                "max_retries, backoff_s and max_backoff_s must be >= 0, failures_to_down >= 1"
            )
        if total_timeout is not None and not total_timeout > 0:
            raise ValueError(f"total_timeout must be > 0, got {total_timeout!r}")
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.total_timeout = total_timeout
        self._closed = False
        if token is None:  # $EVOLVE_REWARD_TOKEN, else the file $EVOLVE_REWARD_TOKEN_FILE names
            token = resolve_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._failover = FailoverTransport(
            urls,
            transport=transport,
            selection=selection,
            failures_to_down=failures_to_down,
            probe_interval_s=probe_interval_s,
            probe_timeout_s=probe_timeout_s,
            health_route=health_route,
            probe_headers=headers,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=trust_env,
            max_response_bytes=max_response_bytes,
        )
        #: the model identity each endpoint reported; a change mid-run is logged and counted
        self.model_watch = ModelWatch()
        self._failover.on_probe_response = self.model_watch.observe
        # Requests go to a placeholder host; the failover transport picks the real endpoint.
        # trust_env=False here: environment proxies must not route around that transport.
        self._client = httpx.Client(
            base_url=_PLACEHOLDER, headers=headers, transport=self._failover, trust_env=False
        )

    # ------------------------------------------------------------------ construction helpers

    @classmethod
    def from_config(
        cls,
        endpoint: str | Sequence[str] | None,
        service_num: int | str | None = None,
        *,
        service_url: str | None = None,
        use_env: bool = False,
        **kwargs: Any,
    ) -> EndpointPool:
        """Build a pool from config values (``reward_model.endpoint`` etc.).

        ``use_env=True`` lets ``VLAC_SERVICE_URL`` / ``VLAC_SERVICE_NUM`` override the arguments.
        The caller owns the pool and closes it.

        Example:
            >>> with EndpointPool.from_config("http://127.0.0.1:8111", service_num=3) as pool:
            ...     pool.urls
            ['http://127.0.0.1:8111', 'http://127.0.0.1:8112', 'http://127.0.0.1:8113']
        """
        url, num = service_url, service_num
        if use_env:
            url = os.environ.get(ENV_SERVICE_URL) or url
            num = os.environ.get(ENV_SERVICE_NUM) or num
        urls = expand_endpoints(endpoint, url, num)
        return cls(urls, **kwargs)

    # ------------------------------------------------------------------ state

    @property
    def urls(self) -> list[str]:
        """The endpoint base URLs, in order."""
        return self._failover.urls

    @property
    def selection(self) -> Selection:
        return self._failover.selection

    @property
    def closed(self) -> bool:
        return self._closed

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per-endpoint counters: url, up, in_flight, requests, successes, failures,
        consecutive_failures, probes, last_error, down_for_s."""
        return self._failover.endpoint_stats()

    def healthy_urls(self) -> list[str]:
        """Endpoints currently marked up."""
        return self._failover.healthy_urls()

    def probe(self) -> dict[str, bool]:
        """Probe every endpoint now (synchronously) and update its up/down mark.

        Returns ``{url: healthy}``. Useful at start-up to fail early or log which replicas answer.
        """
        return self._failover.probe()

    # ------------------------------------------------------------------ requests

    def _default_budget(self, attempt_timeout: float) -> float:
        if self.total_timeout is not None:
            return float(self.total_timeout)
        return (attempt_timeout + self.connect_timeout) * (
            self.max_retries + 1
        ) + self.max_backoff_s * self.max_retries

    def request(
        self,
        method: str,
        route: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        describe_error: Callable[[httpx.Response], str] | None = None,
    ) -> PoolResponse:
        """Send one request with endpoint selection, retries and failover.

        Returns a :class:`PoolResponse` for a 2xx reply. Raises
        :class:`~evolve_envs.reward.clients.errors.RewardServiceError` when the request cannot
        succeed: a non-retryable 4xx at once; otherwise after ``max_retries`` retries, when the time
        budget is spent, or when no endpoint is up. ``timeout`` overrides the per-attempt timeout;
        ``describe_error`` turns an error response into the cause text (default: JSON/text body).
        Retries run under :func:`stamina.retry_context` (``max_retries + 1`` attempts within the
        call budget); :meth:`_Call.backoff` decides whether and how long to wait.
        """
        attempt_timeout = float(timeout) if timeout is not None else self.timeout
        call = _Call(
            self,
            method,
            route if route.startswith("/") else "/" + route,
            attempt_timeout,
            self._default_budget(attempt_timeout),
            describe_error or describe_http_error,
            dict(json=json, content=content, headers=headers),
        )
        for attempt in stamina.retry_context(
            on=call.backoff,
            attempts=self.max_retries + 1,
            timeout=call.budget,
            wait_initial=self.backoff_s,
            wait_max=self.max_backoff_s,
            wait_jitter=0.0,
        ):
            with attempt:
                return call.attempt(attempt.num)
        raise AssertionError("unreachable: stamina re-raises the last failure")

    def _send(self, call: _Call, num: int) -> PoolResponse:
        """One HTTP attempt through the failover transport; a failure raises a
        :class:`RewardServiceError` naming the endpoint the transport chose."""
        remaining = max(0.001, call.deadline - time.monotonic())
        per_try = min(call.attempt_timeout, remaining)
        request = self._client.build_request(
            call.method, call.route, **call.body,
            timeout=httpx.Timeout(per_try, connect=min(self.connect_timeout, remaining)),
            extensions={AVOID: frozenset(call.tried), DEADLINE: call.deadline},
        )  # fmt: skip
        try:
            response = self._client.send(request)
        except NoEndpointAvailable as exc:
            raise call.last_error or RewardServiceError(
                ", ".join(self.urls), call.route, str(exc), kind=ErrorKind.NO_ENDPOINT,
                attempts=num - 1,
            ) from None  # fmt: skip
        except httpx.TimeoutException as exc:
            if time.monotonic() >= call.deadline:
                cause = (
                    f"call budget of {call.budget:.3g} s spent ({type(exc).__name__}; "
                    "reward_model.call_budget_s / total_timeout)"
                )
            else:
                cause = f"timeout after {per_try:.3g} s ({type(exc).__name__})"
            raise call.failed(request, cause, ErrorKind.TIMEOUT, num) from None
        except ResponseRefused as exc:
            cause = f"{exc}; the endpoint is broken or not a reward service"
            raise call.failed(request, cause, ErrorKind.INVALID_RESPONSE, num) from None
        except httpx.TransportError as exc:
            raise call.failed(request, exc, ErrorKind.CONNECT, num) from None
        except RuntimeError as exc:  # httpx: "client has been closed"
            raise RewardServiceError(
                ", ".join(self.urls), call.route, exc, kind=ErrorKind.CLOSED, attempts=num
            ) from exc
        status = response.status_code
        if status >= 400:
            if status == 429 or status >= 500:
                call.retry_after = _retry_after_s(response)
            raise call.failed(request, call.describe(response), ErrorKind.HTTP_STATUS, num, status)
        endpoint = request.extensions[ENDPOINT]
        self.model_watch.observe(endpoint, response.headers)
        return PoolResponse(response, endpoint, num, time.monotonic() - call.start)

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop probing and close connections. Later requests raise ``RewardServiceError``."""
        if self._closed:
            return
        self._closed = True
        self._client.close()  # closes the failover transport: probing stops, connections close

    def __enter__(self) -> EndpointPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EndpointPool({self.urls!r}, selection={self.selection!r}, timeout={self.timeout})"
