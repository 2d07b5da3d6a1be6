"""FailoverTransport: an httpx transport that spreads requests over reward service replicas.

It picks a replica per request, reads every answer within its size and deadline bounds, marks
failing replicas down and re-probes them (docs/ARCHITECTURE.md, "The failover transport").
A busy replica is not a failing one: each replica takes at most ``max_in_flight`` requests from
this transport at once (more wait their turn), and an overload answer (429, or 503 with
``Retry-After``) halves that window instead of counting towards marking the replica down
(docs/sizing.md, "Backpressure: more envs than the service admits").
The first replica here refuses connections, so the second answers and the first is down:

>>> def replicas(request):
...     if request.url.port == 8111:
...         raise httpx.ConnectError("connection refused", request=request)
...     return httpx.Response(200, json={"port": request.url.port})
>>> transport = FailoverTransport(["http://127.0.0.1:8111", "http://127.0.0.1:8112"],
...                               transport=httpx.MockTransport(replicas))
>>> with httpx.Client(base_url="http://reward-service", transport=transport) as client:
...     try:
...         client.get("/health")
...     except httpx.ConnectError:
...         pass
...     client.get("/health").json(), transport.healthy_urls()
({'port': 8112}, ['http://127.0.0.1:8112'])
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from evolve_envs.reward.clients.bounded_read import (
    ACCEPT_ENCODING,
    DEADLINE,
    DEFAULT_MAX_RESPONSE_BYTES,
    DeadlineHTTPTransport,
    ResponseRefused,
    call_deadline,
    read_bounded,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "FailoverTransport",
    "NoEndpointAvailable",
    "describe_http_error",
    "is_overload",
    "AVOID",
    "DEADLINE",
    "ENDPOINT",
]

Selection = Literal["least_in_flight", "round_robin"]

AVOID = "reward_avoid"  # request extension: base URLs this call already tried
ENDPOINT = "reward_endpoint"  # request extension the transport sets: the base URL it chose

_NO_SUCH_ROUTE = frozenset({404, 405, 501})

#: Requests one transport keeps in flight per replica at most: a quarter of the reference
#: service's admission limit (256), so four clients at full window still fit (docs/sizing.md).
DEFAULT_MAX_IN_FLIGHT = 64


def is_overload(response: httpx.Response) -> bool:
    """Whether an answer says "busy, come back later": 429, or 503 with ``Retry-After``.

    A busy replica is alive; its answer asks the client to wait, not to mark it down. A 503
    without ``Retry-After`` (or any other 5xx) is a failure.

    >>> is_overload(httpx.Response(503, headers={"Retry-After": "1"}))
    True
    >>> is_overload(httpx.Response(503)), is_overload(httpx.Response(429))
    (False, True)
    """
    status = response.status_code
    return status == 429 or (status == 503 and "retry-after" in response.headers)


class NoEndpointAvailable(httpx.TransportError):
    """Every replica is marked down and not yet due for a probe."""


@dataclass(slots=True, eq=False)
class _Endpoint:
    url: str
    window: float  # requests it may have in flight now (AIMD: halved on overload, +1/window)
    in_flight: int = 0
    requests: int = 0
    overloads: int = 0  # 429/503-with-Retry-After answers (never towards failures_to_down)
    successes: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    down_until: float | None = None  # monotonic time of the next probe; None = up
    down_since: float | None = None
    last_error: str | None = None
    probes: int = 0

    @property
    def up(self) -> bool:
        return self.down_until is None


def _json_detail(response: httpx.Response) -> str | None:
    """The ``error`` / ``detail`` / ``message`` of a JSON error body, else the whole body."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict):
        for key in ("error", "detail", "message"):
            if key in body:
                return str(body[key])
    return None if body is None else str(body)


def describe_http_error(response: httpx.Response, limit: int = 300) -> str:
    """``"HTTP 503 Service Unavailable: <server message>"`` from a JSON/text error body."""
    head = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    ctype = response.headers.get("content-type", "")
    detail = _json_detail(response) if "json" in ctype else None
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


class FailoverTransport(httpx.BaseTransport):
    """Pick a replica for each request, keep their in-flight counts and up/down marks.

    ``transport``: the inner transport (default: httpx's HTTP transport with ``limits``);
    ``failures_to_down``: consecutive failures (5xx other than an overload answer, timeouts,
    resets) that mark a replica down; a refused connection marks it down at once;
    ``max_in_flight``: the most requests in flight to one replica; more wait for a slot until
    their deadline. The window shrinks to half on an overload answer and grows back by one per
    window of successes (additive increase, multiplicative decrease);
    ``health_route``: the first probe route (``POST`` when it ends in ``healthcheck``);
    ``probe_headers``: sent with every probe (the bearer token); ``max_response_bytes``: the most
    one answer may have once decoded.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        transport: httpx.BaseTransport | None = None,
        selection: Selection = "least_in_flight",
        failures_to_down: int = 3,
        probe_interval_s: float = 5.0,
        probe_timeout_s: float = 2.0,
        health_route: str = "/health",
        probe_headers: Mapping[str, str] | None = None,
        limits: httpx.Limits | None = None,
        trust_env: bool = False,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        if not urls:
            raise ValueError("FailoverTransport needs at least one endpoint")
        if not max_in_flight >= 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        self.max_in_flight = int(max_in_flight)
        if selection not in ("least_in_flight", "round_robin"):
            raise ValueError(f"selection must be 'least_in_flight' or 'round_robin': {selection!r}")
        self.selection: Selection = selection
        self.failures_to_down = int(failures_to_down)
        self.probe_interval_s = float(probe_interval_s)
        self.probe_timeout_s = float(probe_timeout_s)
        self.health_route = health_route if health_route.startswith("/") else "/" + health_route
        if not max_response_bytes >= 1:
            raise ValueError(f"max_response_bytes must be >= 1, got {max_response_bytes!r}")
        self.max_response_bytes = int(max_response_bytes)
        self._probe_headers = {"Accept-Encoding": ACCEPT_ENCODING, **(probe_headers or {})}
        if transport is None:
            transport = DeadlineHTTPTransport(limits=limits, trust_env=trust_env)
        self._inner = transport
        self._endpoints = [_Endpoint(url, window=float(self.max_in_flight)) for url in urls]
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._queued = 0  # requests that waited for a slot, and how long in all
        self._queue_wait_s = 0.0
        self._rotation = 0
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._prober: threading.Thread | None = None
        #: called with `(url, headers)` of every successful health probe (the endpoint pool
        #: re-checks the model identity there: a restarted server is noticed before it answers)
        self.on_probe_response: Callable[[str, httpx.Headers], None] | None = None

    @property
    def urls(self) -> list[str]:
        """The replicas' base URLs, in order."""
        return [ep.url for ep in self._endpoints]

    def endpoint_stats(self) -> list[dict[str, object]]:
        """Per-endpoint counters (url, up, in_flight, requests, failures, last_error ...)."""
        now = time.monotonic()
        with self._lock:
            return [
                {
                    "url": ep.url,
                    "up": ep.up,
                    "in_flight": ep.in_flight,
                    "window": int(ep.window),
                    "requests": ep.requests,
                    "overloads": ep.overloads,
                    "successes": ep.successes,
                    "failures": ep.failures,
                    "consecutive_failures": ep.consecutive_failures,
                    "probes": ep.probes,
                    "last_error": ep.last_error,
                    "down_for_s": None if ep.down_since is None else now - ep.down_since,
                }
                for ep in self._endpoints
            ]

    def queue_stats(self) -> dict[str, float]:
        """``{"queued": n, "queue_wait_s": s}``: requests that waited for a free slot, and how
        long they waited in all (backpressure, not failure)."""
        with self._lock:
            return {"queued": self._queued, "queue_wait_s": self._queue_wait_s}

    def healthy_urls(self) -> list[str]:
        """Endpoints currently marked up."""
        with self._lock:
            return [ep.url for ep in self._endpoints if ep.up]

    def down_summary(self) -> str:
        """``"<url> (<last error>; next probe in <s> s); ..."`` for every replica."""
        now = time.monotonic()
        with self._lock:
            return "; ".join(
                f"{ep.url} ({ep.last_error or 'down'}; next probe in "
                f"{0.0 if ep.down_until is None else max(0.0, ep.down_until - now):.1f} s)"
                for ep in self._endpoints
            )

    # ------------------------------------------------------------------ requests

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to the chosen replica; its body is read before in_flight drops.

        With every usable replica at its window, the request waits for a slot until its
        ``DEADLINE`` extension (``httpx.PoolTimeout`` after that; the replica is not blamed).
        """
        deadline = request.extensions.get(DEADLINE)
        ep = self._acquire(request.extensions.get(AVOID, ()), deadline)
        if ep is None:
            raise NoEndpointAvailable(
                "every endpoint is marked down: " + self.down_summary(), request=request
            )
        if ep is _NO_SLOT:
            raise httpx.PoolTimeout(
                f"no free request slot before the call's deadline (at most {self.max_in_flight} "
                "in flight per endpoint; every usable endpoint was busy)",
                request=request,
            )
        request.extensions[ENDPOINT] = ep.url
        request.url = httpx.URL(ep.url + request.url.raw_path.decode("ascii"))
        request.headers["Host"] = request.url.netloc.decode("ascii")
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        released: bool | None = False
        try:
            with call_deadline(deadline):
                response = self._inner.handle_request(request)
                response = read_bounded(response, request, self.max_response_bytes, deadline)
            released = None  # answered: judged below
        except (httpx.TransportError, ResponseRefused) as exc:
            # Refused connections mark the replica down at once; a reset, a dropped response,
            # a timeout or an answer too large to read counts towards failures_to_down (a
            # healthy server can drop one).
            refused = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            released = True
            self._release(ep, ok=False, mark_down=refused, error=_describe(exc))
            raise
        finally:
            if released is False:  # interrupted (or any other error): free the slot
                self._release(ep, ok=False, mark_down=False, error=None)
        status = response.status_code
        if status < 400:
            self._release(ep, ok=True, mark_down=False, error=None)
        elif is_overload(response):  # busy, not broken: a smaller window, never "down"
            self._release_overloaded(ep)
        elif status >= 500:
            self._release(ep, ok=False, mark_down=False, error=describe_http_error(response))
        else:  # a 4xx: the request was bad, the replica is fine
            self._release(ep, ok=False, mark_down=False, error=None)
        return response

    # ------------------------------------------------------------------ selection

    def _acquire(self, avoid: Collection[str], deadline: float | None = None) -> _Endpoint | None:
        """A replica with a free slot (its in-flight count raised), waiting for one until
        ``deadline``; ``None`` when none is up, ``_NO_SLOT`` when the deadline passed first."""
        with self._lock:
            waited_from: float | None = None
            while not self._closed:
                up = [ep for ep in self._endpoints if ep.up]
                fresh = [ep for ep in up if ep.url not in avoid]
                candidates = fresh or up
                if not candidates:
                    return None
                free = [ep for ep in candidates if ep.in_flight < max(1, int(ep.window))]
                if free:
                    break
                now = time.monotonic()
                if waited_from is None:
                    waited_from = now
                    self._queued += 1
                if deadline is not None and now >= deadline:
                    self._queue_wait_s += now - waited_from
                    return _NO_SLOT
                # woken by a freed slot; re-check at least every probe interval (a replica may
                # come back up) and at the deadline
                wait = self.probe_interval_s if deadline is None else deadline - now
                self._slot_freed.wait(min(wait, self.probe_interval_s))
            else:
                return None  # closed while waiting
            if waited_from is not None:
                self._queue_wait_s += time.monotonic() - waited_from
            start = self._rotation % len(free)
            self._rotation += 1
            ordered = free[start:] + free[:start]
            chosen = ordered[0]
            if self.selection == "least_in_flight":
                chosen = min(ordered, key=lambda ep: ep.in_flight)
            chosen.in_flight += 1
            chosen.requests += 1
            return chosen

    def has_fresh(self, avoid: Collection[str]) -> bool:
        """Whether an endpoint that is up is not in ``avoid``."""
        with self._lock:
            return any(ep.up and ep.url not in avoid for ep in self._endpoints)

    def _release(self, ep: _Endpoint, *, ok: bool, mark_down: bool, error: str | None) -> None:
        start_prober = False
        with self._lock:
            ep.in_flight -= 1
            self._slot_freed.notify_all()
            if ok:
                ep.successes += 1
                ep.consecutive_failures = 0
                ep.window = min(float(self.max_in_flight), ep.window + 1.0 / ep.window)
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

    def _release_overloaded(self, ep: _Endpoint) -> None:
        """An overload answer: halve the replica's window; it stays up and its failure streak
        is untouched (the caller waits ``Retry-After`` and tries again)."""
        with self._lock:
            ep.in_flight -= 1
            ep.overloads += 1
            ep.window = max(1.0, ep.window / 2.0)
            self._slot_freed.notify_all()

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
        timeout = httpx.Timeout(self.probe_timeout_s).as_dict()
        for method, route in self._probe_routes():
            request = httpx.Request(
                method, url + route, headers=self._probe_headers, extensions={"timeout": timeout}
            )
            deadline = time.monotonic() + self.probe_timeout_s
            try:
                with call_deadline(deadline):
                    response = self._inner.handle_request(request)
                    response = read_bounded(response, request, self.max_response_bytes, deadline)
            except (httpx.HTTPError, RuntimeError) as exc:
                return False, f"health probe failed: {type(exc).__name__}: {exc}"
            if response.status_code < 300:
                if self.on_probe_response is not None:
                    self.on_probe_response(url, response.headers)
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
                self._slot_freed.notify_all()  # waiting requests may use it again
            else:
                ep.down_until = time.monotonic() + self.probe_interval_s
                ep.last_error = error
        return ok

    def probe(self) -> dict[str, bool]:
        """Probe every endpoint now and update its up/down mark: ``{url: healthy}``."""
        results: dict[str, bool] = {}
        for ep in self._endpoints:
            ok = self._probe_one(ep)
            if not ok:
                with self._lock:
                    if ep.down_since is None:
                        ep.down_since = time.monotonic()
                self._ensure_prober()
            results[ep.url] = ok
        return results

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop probing and close the inner transport."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._wake.set()
        with self._lock:
            self._slot_freed.notify_all()
        prober = self._prober
        if prober is not None and prober is not threading.current_thread():
            prober.join(timeout=self.probe_timeout_s + 1.0)
        self._inner.close()


_NO_SLOT = _Endpoint("", window=0.0)  # _acquire's answer when the deadline passed first


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
