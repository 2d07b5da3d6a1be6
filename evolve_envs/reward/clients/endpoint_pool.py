"""EndpointPool: balanced, retrying, health-aware access to a set of reward service replicas.

One ``httpx.Client`` on a :class:`~evolve_envs.reward.clients.failover_transport.FailoverTransport`;
the pool retries within the call's budget and raises a ``RewardServiceError`` naming endpoint,
route and cause (docs/ARCHITECTURE.md, "The failover transport"). Two replicas here; the first
refuses connections, so the call moves to the second and the first is marked down:

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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import stamina

from evolve_envs.reward.clients.bounded_read import DEFAULT_MAX_RESPONSE_BYTES, ResponseRefused
from evolve_envs.reward.clients.endpoint_urls import (
    ENV_SERVICE_NUM,
    ENV_SERVICE_URL,
    expand_endpoints,
)
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.failover_transport import (
    AVOID,
    DEADLINE,
    DEFAULT_MAX_IN_FLIGHT,
    ENDPOINT,
    FailoverTransport,
    NoEndpointAvailable,
    Selection,
    describe_http_error,
)
from evolve_envs.reward.clients.model_watch import ModelWatch
from evolve_envs.reward.clients.pool_call import PoolCall, PoolResponse
from evolve_envs.reward.protocol.token import resolve_token

__all__ = ["EndpointPool", "describe_http_error"]

ENV_TOKEN = "EVOLVE_REWARD_TOKEN"
_PLACEHOLDER = "http://reward-service"  # base URL of requests before the transport picks one


class EndpointPool:
    """Balanced, retrying, health-aware access to one or more reward service replicas.

    Args:
        endpoints: one base URL, a comma-separated string, or a list (``expand_endpoints``).
        timeout: per-attempt read/write timeout in seconds; ``connect_timeout`` the connect one.
        max_retries: extra attempts after the first for retryable failures; ``backoff_s`` the first
            wait before retrying an endpoint that already failed (doubling, capped by
            ``max_backoff_s``, lengthened by ``Retry-After``).
        total_timeout: the whole call's budget, retries and backoff included (``None``: derived from
            the per-attempt timeouts); every connect, write and read is cut to what is left of it.
        max_response_bytes: the most bytes one decoded answer may have (16 MiB by default).
        max_in_flight: the most requests in flight to one endpoint; more wait for a slot (the
            window halves on an overload answer and grows back as answers come).
        token: bearer token for every request and probe (``None``: ``$EVOLVE_REWARD_TOKEN``; ``""``:
            none).
        probe_interval_s, probe_timeout_s, health_route, failures_to_down, selection: the failover
            transport's (docs/ARCHITECTURE.md).
        max_connections, trust_env, transport: the httpx connection pool size, whether httpx reads
            proxy settings from the environment (off), and the transport below (tests pass
            ``httpx.MockTransport``).
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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
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
            max_in_flight=max_in_flight,
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

    def endpoint_stats(self) -> list[dict[str, object]]:
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
        json: object = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        describe_error: Callable[[httpx.Response], str] | None = None,
    ) -> PoolResponse:
        """Send one request with endpoint selection, retries and failover.

        Returns a :class:`PoolResponse` for a 2xx reply. Raises
        :class:`~evolve_envs.reward.clients.errors.RewardServiceError` when the request cannot
        succeed: a non-retryable 4xx at once; otherwise after ``max_retries`` failed retries, when
        the time budget is spent, or when no endpoint is up. An overload answer (429, or 503 with
        ``Retry-After``) is waited out and tried again within the budget; it uses up no retry.
        ``timeout`` overrides the per-attempt timeout; ``describe_error`` turns an error response
        into the cause text (default: JSON/text body). Retries run under
        :func:`stamina.retry_context` within the call budget;
        :meth:`~evolve_envs.reward.clients.pool_call.PoolCall.backoff` decides whether and how
        long to wait.
        """
        attempt_timeout = float(timeout) if timeout is not None else self.timeout
        call = PoolCall(
            method,
            route if route.startswith("/") else "/" + route,
            attempt_timeout,
            self._default_budget(attempt_timeout),
            describe_error or describe_http_error,
            dict(json=json, content=content, headers=headers),
            failover=self._failover,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            max_retries=self.max_retries,
        )
        # attempts are bounded by the call budget and by call.backoff (max_retries failures;
        # overload answers are waited out)
        for attempt in stamina.retry_context(
            on=call.backoff,
            attempts=None,
            timeout=call.budget,
            wait_initial=self.backoff_s,
            wait_max=self.max_backoff_s,
            wait_jitter=0.0,
        ):
            with attempt:
                return self._send(call, attempt.num)
        raise AssertionError("unreachable: stamina re-raises the last failure")

    def _send(self, call: PoolCall, num: int) -> PoolResponse:
        """Attempt ``num`` (1-based) through the failover transport, on an endpoint this call has
        not tried while one is up; a failure raises a :class:`RewardServiceError` naming the
        endpoint the transport chose."""
        if self._closed:
            raise RewardServiceError(
                ", ".join(self.urls), call.route, "endpoint pool is closed", kind=ErrorKind.CLOSED
            )
        remaining = max(0.001, call.deadline - time.monotonic())
        per_try = min(call.attempt_timeout, remaining)
        request = self._client.build_request(
            call.method,
            call.route,
            **call.body,
            timeout=httpx.Timeout(per_try, connect=min(self.connect_timeout, remaining)),
            extensions={AVOID: frozenset(call.tried), DEADLINE: call.deadline},
        )
        try:
            response = self._client.send(request)
        except NoEndpointAvailable as exc:
            raise call.last_error or RewardServiceError(
                ", ".join(self.urls),
                call.route,
                str(exc),
                kind=ErrorKind.NO_ENDPOINT,
                attempts=num - 1,
            ) from None
        except httpx.TimeoutException as exc:
            if time.monotonic() >= call.deadline and call.overloads:
                raise call.budget_spent_overloaded(request, num) from None
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
        if response.status_code >= 400:
            raise call.answered_error(request, response, num)
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
