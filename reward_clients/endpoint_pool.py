"""EndpointPool: balanced, retrying, health-aware access to a set of reward service replicas.

The pool owns one ``httpx.Client`` (keep-alive connections are reused across calls and threads)
and a list of base URLs. For each request it

* picks an endpoint: ``"least_in_flight"`` (default; ties rotate) or ``"round_robin"``;
* retries (through :func:`stamina.retry_context`) with exponential backoff on connect errors,
  timeouts, connection resets, HTTP 429 and 5xx, moving to another endpoint when one is
  available (``max_retries`` extra attempts, bounded by a total time budget); any other 4xx is
  the caller's fault and is *not* retried. stamina logs each scheduled retry on the ``stamina``
  logger and counts it in Prometheus when ``prometheus_client`` is installed;
* marks an endpoint *down* when it refuses connections, or after ``failures_to_down``
  consecutive failures (429/5xx, timeouts, resets). A down endpoint gets no traffic; a
  background thread re-probes it every ``probe_interval_s`` and brings it back when it answers
  (``health_route`` first, then ``GET /health``, then ``POST /healthcheck``: a 2xx is healthy;
  when every one is missing (404/405/501), any HTTP answer below 500 counts as alive, so servers
  with no health route at all, e.g. a scorer that only has ``POST /``, come back). When every
  endpoint is down, requests fail at once (no hammering, no waiting) until a probe succeeds.

Failures raise :class:`~reward_clients.errors.RewardServiceError` naming endpoint, route and cause;
the clients turn that into a fallback value or re-raise it, per their failure policy.

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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import stamina

from reward_clients.errors import ErrorKind, RewardServiceError

__all__ = [
    "EndpointPool",
    "PoolResponse",
    "expand_endpoints",
    "endpoints_from_env",
    "describe_http_error",
]

Selection = Literal["least_in_flight", "round_robin"]

ENV_SERVICE_URL = "VLAC_SERVICE_URL"
ENV_SERVICE_NUM = "VLAC_SERVICE_NUM"
ENV_TOKEN = "EVOLVE_REWARD_TOKEN"


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


_NO_SUCH_ROUTE = frozenset({404, 405, 501})


@dataclass(frozen=True, slots=True)
class PoolResponse:
    """A successful (2xx) reply: the httpx response, who answered, after how many attempts."""

    response: httpx.Response
    endpoint: str
    attempts: int
    latency_s: float


class _Endpoint:
    __slots__ = (
        "url",
        "in_flight",
        "requests",
        "successes",
        "failures",
        "consecutive_failures",
        "down_until",
        "down_since",
        "last_error",
        "probes",
    )

    def __init__(self, url: str) -> None:
        self.url = url
        self.in_flight = 0
        self.requests = 0
        self.successes = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.down_until: float | None = None  # monotonic time of the next probe; None = up
        self.down_since: float | None = None
        self.last_error: str | None = None
        self.probes = 0

    @property
    def up(self) -> bool:
        return self.down_until is None


def describe_http_error(response: httpx.Response, limit: int = 300) -> str:
    """``"HTTP 503 Service Unavailable: <server message>"`` from a JSON/text error body."""
    head = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    ctype = response.headers.get("content-type", "")
    detail: str | None = None
    if "json" in ctype:
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            for key in ("error", "detail", "message"):
                if key in body:
                    detail = str(body[key])
                    break
        if detail is None and body is not None:
            detail = str(body)
    if detail is None and ("text" in ctype or "json" in ctype):
        detail = response.text
    if detail is None and response.content:
        detail = f"<{len(response.content)} bytes of {ctype or 'unknown type'}>"
    if not detail:
        return head
    detail = " ".join(detail.split())
    if len(detail) > limit:
        detail = detail[:limit] + "…"
    return f"{head}: {detail}"


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
        """Attempt ``num`` (1-based) on the best endpoint not yet tried by this call."""
        pool = self.pool
        if pool.closed:
            raise RewardServiceError(
                ", ".join(pool.urls), self.route, "endpoint pool is closed", kind=ErrorKind.CLOSED
            )
        ep = pool._acquire(self.tried)
        if ep is None:
            raise self.last_error or pool._no_endpoint_error(self.route, num - 1)
        try:
            response = pool._send(ep, self, num)
        except RewardServiceError as exc:
            self.tried.add(ep.url)
            self.last_error = exc
            raise
        return PoolResponse(response, ep.url, num, time.monotonic() - self.start)

    def backoff(self, exc: Exception) -> bool | float:
        """stamina's backoff hook: ``False`` to give up now, else the seconds to wait.

        Moving to an untried endpoint happens at once; when every usable endpoint already failed
        this call, the wait doubles from ``backoff_s`` (jittered to 50-100 %, capped by
        ``max_backoff_s``) and a ``Retry-After`` lengthens it up to that cap. No endpoint up, or
        a wait that would end past the call budget: fail now.
        """
        if not isinstance(exc, RewardServiceError) or not _retryable(exc):
            return False
        pool = self.pool
        if not pool.healthy_urls():
            return False  # nothing left to try: fail now instead of sleeping
        if pool._has_fresh(self.tried):
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
        total_timeout: upper bound on one request, retries and backoff included (each attempt's
            timeouts are cut to what is left of it). ``None`` means ``(timeout + connect_timeout)
            * (max_retries + 1) + max_backoff_s * max_retries`` (385 s with the defaults);
            ``make_env`` passes ``reward_model.call_budget_s``.
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
    ) -> None:
        urls = expand_endpoints(endpoints)
        if selection not in ("least_in_flight", "round_robin"):
            raise ValueError(f"selection must be 'least_in_flight' or 'round_robin': {selection!r}")
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
        self.probe_interval_s = float(probe_interval_s)
        self.probe_timeout_s = float(probe_timeout_s)
        self.health_route = health_route if health_route.startswith("/") else "/" + health_route
        self.failures_to_down = int(failures_to_down)
        self.selection: Selection = selection
        self._endpoints = [_Endpoint(url) for url in urls]
        self._lock = threading.Lock()
        self._rotation = 0
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._prober: threading.Thread | None = None
        if token is None:
            token = os.environ.get(ENV_TOKEN) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.Client(
            headers=headers, limits=limits, trust_env=trust_env, transport=transport
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
        return [ep.url for ep in self._endpoints]

    @property
    def closed(self) -> bool:
        return self._closed

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Per-endpoint counters: url, up, in_flight, requests, successes, failures,
        consecutive_failures, probes, last_error, down_for_s."""
        now = time.monotonic()
        with self._lock:
            return [
                {
                    "url": ep.url,
                    "up": ep.up,
                    "in_flight": ep.in_flight,
                    "requests": ep.requests,
                    "successes": ep.successes,
                    "failures": ep.failures,
                    "consecutive_failures": ep.consecutive_failures,
                    "probes": ep.probes,
                    "last_error": ep.last_error,
                    "down_for_s": None if ep.down_since is None else now - ep.down_since,
                }
                for ep in self._endpoints
            ]

    def healthy_urls(self) -> list[str]:
        """Endpoints currently marked up."""
        with self._lock:
            return [ep.url for ep in self._endpoints if ep.up]

    # ------------------------------------------------------------------ selection

    def _acquire(self, avoid: set[str]) -> _Endpoint | None:
        with self._lock:
            up = [ep for ep in self._endpoints if ep.up]
            fresh = [ep for ep in up if ep.url not in avoid]
            candidates = fresh or up
            if not candidates:
                return None
            start = self._rotation % len(candidates)
            self._rotation += 1
            ordered = candidates[start:] + candidates[:start]
            chosen = ordered[0]
            if self.selection == "least_in_flight":
                chosen = min(ordered, key=lambda ep: ep.in_flight)
            chosen.in_flight += 1
            chosen.requests += 1
            return chosen

    def _has_fresh(self, avoid: set[str]) -> bool:
        with self._lock:
            return any(ep.up and ep.url not in avoid for ep in self._endpoints)

    def _release(self, ep: _Endpoint, *, ok: bool, mark_down: bool, error: str | None) -> None:
        start_prober = False
        with self._lock:
            ep.in_flight -= 1
            if ok:
                ep.successes += 1
                ep.consecutive_failures = 0
                return
            if error is None:  # a 4xx: the request was bad, the endpoint is fine
                return
            ep.failures += 1
            ep.consecutive_failures += 1
            ep.last_error = error
            if (mark_down or ep.consecutive_failures >= self.failures_to_down) and ep.up:
                now = time.monotonic()
                ep.down_until = now + self.probe_interval_s
                ep.down_since = now
                start_prober = True
        if start_prober:
            self._ensure_prober()

    # ------------------------------------------------------------------ health probing

    def _ensure_prober(self) -> None:
        with self._lock:
            if self._closed or (self._prober is not None and self._prober.is_alive()):
                self._wake.set()
                return
            self._prober = threading.Thread(
                target=self._probe_loop, name="reward-endpoint-prober", daemon=True
            )
            self._prober.start()

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                down = [ep for ep in self._endpoints if not ep.up]
                if not down:
                    self._prober = None
                    return
                now = time.monotonic()
                due = [ep for ep in down if ep.down_until is not None and ep.down_until <= now]
                next_due = min(ep.down_until for ep in down if ep.down_until is not None)
            for ep in due:
                if self._stop.is_set():
                    return
                self._probe_one(ep)
            if not due:
                self._wake.wait(max(0.0, min(next_due - time.monotonic(), self.probe_interval_s)))
                self._wake.clear()

    def _probe_routes(self) -> list[tuple[str, str]]:
        """(method, route) pairs a probe tries in order: the configured route, then fallbacks."""
        first = "POST" if self.health_route.rstrip("/").endswith("healthcheck") else "GET"
        routes = [(first, self.health_route)]
        for fallback in (("GET", "/health"), ("POST", "/healthcheck")):
            if fallback not in routes:
                routes.append(fallback)
        return routes

    def _probe_request(self, url: str) -> tuple[bool, str | None]:
        response = None
        for method, route in self._probe_routes():
            try:
                response = self._client.request(method, url + route, timeout=self.probe_timeout_s)
            except (httpx.HTTPError, RuntimeError) as exc:
                return False, f"health probe failed: {type(exc).__name__}: {exc}"
            if response.status_code < 300:
                return True, None
            if response.status_code not in _NO_SUCH_ROUTE:
                return False, f"health probe: {describe_http_error(response)}"
        # No health route at all: the server answered over HTTP (404/405/501), so it is alive.
        return True, None

    def _probe_one(self, ep: _Endpoint) -> bool:
        ok, error = self._probe_request(ep.url)
        with self._lock:
            ep.probes += 1
            if ok:
                ep.down_until = None
                ep.down_since = None
                ep.consecutive_failures = 0
            else:
                ep.down_until = time.monotonic() + self.probe_interval_s
                ep.last_error = error
        return ok

    def probe(self) -> dict[str, bool]:
        """Probe every endpoint now (synchronously) and update its up/down mark.

        Returns ``{url: healthy}``. Useful at start-up to fail early or log which replicas answer.
        """
        results = {}
        for ep in self._endpoints:
            ok = self._probe_one(ep)
            if not ok:
                with self._lock:
                    if ep.down_since is None:
                        ep.down_since = time.monotonic()
                self._ensure_prober()
            results[ep.url] = ok
        return results

    # ------------------------------------------------------------------ requests

    def _default_budget(self, attempt_timeout: float) -> float:
        if self.total_timeout is not None:
            return float(self.total_timeout)
        return (attempt_timeout + self.connect_timeout) * (
            self.max_retries + 1
        ) + self.max_backoff_s * self.max_retries

    def _no_endpoint_error(self, route: str, attempts: int) -> RewardServiceError:
        now = time.monotonic()
        with self._lock:
            parts = []
            for ep in self._endpoints:
                wait = 0.0 if ep.down_until is None else max(0.0, ep.down_until - now)
                parts.append(f"{ep.url} ({ep.last_error or 'down'}; next probe in {wait:.1f} s)")
        return RewardServiceError(
            ", ".join(self.urls),
            route,
            "every endpoint is marked down: " + "; ".join(parts),
            kind=ErrorKind.NO_ENDPOINT,
            attempts=attempts,
        )

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
        :class:`~reward_clients.errors.RewardServiceError` when the request cannot succeed:
        a non-retryable 4xx at once; otherwise after ``max_retries`` retries, when the time
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

    def _send(self, ep: _Endpoint, call: _Call, num: int) -> httpx.Response:
        """One HTTP attempt on ``ep``; a failure releases ``ep`` and raises a
        :class:`RewardServiceError` (a 2xx/3xx answer is released as a success)."""
        remaining = max(0.001, call.deadline - time.monotonic())
        per_try = min(call.attempt_timeout, remaining)
        timeout = httpx.Timeout(per_try, connect=min(self.connect_timeout, remaining))
        mark_down = False
        try:
            response = self._client.request(
                call.method, ep.url + call.route, timeout=timeout, **call.body
            )
        except httpx.TimeoutException as exc:
            mark_down = isinstance(exc, httpx.ConnectTimeout)
            error = RewardServiceError(
                ep.url, call.route, f"timeout after {per_try:.3g} s ({type(exc).__name__})",
                kind=ErrorKind.TIMEOUT, attempts=num,
            )  # fmt: skip
        except httpx.TransportError as exc:
            # Refused connections mark the endpoint down at once; a reset or a dropped
            # response counts towards failures_to_down (a healthy server can drop one).
            mark_down = isinstance(exc, httpx.ConnectError)
            error = RewardServiceError(
                ep.url, call.route, exc, kind=ErrorKind.CONNECT, attempts=num
            )
        except RuntimeError as exc:  # httpx: "client has been closed"
            self._release(ep, ok=False, mark_down=False, error=None)
            raise RewardServiceError(
                ep.url, call.route, exc, kind=ErrorKind.CLOSED, attempts=num
            ) from exc
        else:
            if response.status_code < 400:
                self._release(ep, ok=True, mark_down=False, error=None)
                return response
            error = RewardServiceError(
                ep.url, call.route, call.describe(response), kind=ErrorKind.HTTP_STATUS,
                status_code=response.status_code, attempts=num,
            )  # fmt: skip
            if not _retryable(error):  # a 4xx: the request was bad, the endpoint is fine
                self._release(ep, ok=False, mark_down=False, error=None)
                raise error
            call.retry_after = _retry_after_s(response)
        self._release(ep, ok=False, mark_down=mark_down, error=error.cause)
        raise error

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop probing and close connections. Later requests raise ``RewardServiceError``."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        prober = self._prober
        if prober is not None and prober is not threading.current_thread():
            prober.join(timeout=self.probe_timeout_s + 1.0)
        self._client.close()

    def __enter__(self) -> EndpointPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EndpointPool({self.urls!r}, selection={self.selection!r}, timeout={self.timeout})"
