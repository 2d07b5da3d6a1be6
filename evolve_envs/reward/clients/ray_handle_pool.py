"""RayHandlePool: reach a reward service deployed on Ray Serve through a `DeploymentHandle`.

With `endpoint: "ray://<app_name>"`, Ray actors on the Serve cluster skip HTTP: each request is a
handle call to `RewardDeployment.call`, run through the same FastAPI app (same routes, checks,
token and error bodies), so the clients return the same `CallResult`s.

>>> pool = RayHandlePool("ray://reward", timeout=30, token="s3cret")
>>> pool.url, pool  # the token is never shown
('ray://reward', RayHandlePool('ray://reward', timeout=30.0))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

from evolve_envs.reward.clients.endpoint_pool import describe_http_error
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.pool_call import PoolResponse
from evolve_envs.reward.protocol.token import resolve_token

__all__ = ["RayHandlePool", "RAY_SCHEME", "is_ray_endpoint"]

RAY_SCHEME = "ray://"
DEPLOYMENT = "RewardDeployment"


def is_ray_endpoint(endpoint: object) -> bool:
    """Whether a config `endpoint` (string or one-element list) names a Ray Serve application."""
    if isinstance(endpoint, (list, tuple)) and len(endpoint) == 1:
        endpoint = endpoint[0]
    return isinstance(endpoint, str) and endpoint.startswith(RAY_SCHEME)


class RayHandlePool:
    """The `EndpointPool` request interface over a Ray Serve `DeploymentHandle`.

    `max_retries` further attempts follow a 429/5xx or a failed call (a replica that died: the retry
    goes to another), `backoff_s` apart (doubling), within `total_timeout` (None: `timeout` per
    attempt only); `token` as `EndpointPool`'s.
    """

    is_reward_transport = True

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 120.0,
        max_retries: int = 2,
        backoff_s: float = 0.1,
        total_timeout: float | None = None,
        token: str | None = None,
    ) -> None:
        if not is_ray_endpoint(endpoint):
            raise ValueError(f"endpoint {endpoint!r} is not of the form 'ray://<app_name>'")
        self.app_name = endpoint[len(RAY_SCHEME) :].strip("/")
        if not self.app_name:
            raise ValueError(f"endpoint {endpoint!r} names no Serve application")
        self.url = RAY_SCHEME + self.app_name
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.total_timeout = None if total_timeout is None else float(total_timeout)
        if token is None:  # $EVOLVE_REWARD_TOKEN, else the file $EVOLVE_REWARD_TOKEN_FILE names
            token = resolve_token() or ""
        self._auth = {"authorization": f"Bearer {token}"} if token else {}
        self._handle: DeploymentHandle | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def urls(self) -> list[str]:
        return [self.url]

    @property
    def closed(self) -> bool:
        return self._closed

    def healthy_urls(self) -> list[str]:
        return [] if self._closed else [self.url]

    def endpoint_stats(self) -> list[dict[str, object]]:
        return [{"url": self.url, "up": not self._closed}]

    def _get_handle(self) -> DeploymentHandle:
        with self._lock:
            if self._handle is None:
                import ray
                from ray import serve

                if not ray.is_initialized():  # never start a private local Ray by accident
                    raise RuntimeError(
                        f"{self.url} needs a connection to the Ray cluster that serves it: "
                        "call ray.init(address=...) first, or run inside one of its actors"
                    )
                self._handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app_name)
            return self._handle

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
        """One request through the handle; raises `RewardServiceError` as `EndpointPool` does."""
        if not route.startswith("/"):
            route = "/" + route
        per_attempt = float(timeout) if timeout is not None else self.timeout
        describe = describe_error or describe_http_error
        start = time.monotonic()
        deadline = None if self.total_timeout is None else start + self.total_timeout
        attempts = 0
        while True:
            if self._closed:
                raise RewardServiceError(self.url, route, "pool is closed", kind=ErrorKind.CLOSED)
            limit = per_attempt
            if deadline is not None:
                limit = min(limit, deadline - time.monotonic())
                if limit <= 0:
                    raise RewardServiceError(
                        self.url,
                        route,
                        f"call budget of {self.total_timeout:g} s spent",
                        kind=ErrorKind.TIMEOUT,
                        attempts=attempts,
                    )
            attempts += 1
            retryable = True
            try:
                call = (method, route, json, content, self._headers(headers))
                status, resp_headers, body = (
                    self._get_handle().call.remote(call).result(timeout_s=limit)
                )
            except TimeoutError:
                error = RewardServiceError(
                    self.url,
                    route,
                    f"timeout after {limit:.3g} s",
                    kind=ErrorKind.TIMEOUT,
                    attempts=attempts,
                )
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds (actor died, ...)
                error = RewardServiceError(
                    self.url, route, exc, kind=ErrorKind.CONNECT, attempts=attempts
                )
            else:
                response = httpx.Response(status, headers=resp_headers, content=body)
                if status < 400:
                    return PoolResponse(response, self.url, attempts, time.monotonic() - start)
                error = RewardServiceError(
                    self.url,
                    route,
                    describe(response),
                    kind=ErrorKind.HTTP_STATUS,
                    status_code=status,
                    attempts=attempts,
                )
                retryable = status == 429 or status >= 500
            if not retryable or attempts > self.max_retries:
                raise error
            pause = self.backoff_s * 2 ** (attempts - 1)
            if deadline is not None and time.monotonic() + pause >= deadline:
                raise error  # no time left for another attempt
            time.sleep(pause)

    def _headers(self, headers: Mapping[str, str] | None) -> dict[str, str] | None:
        """The call's headers with the bearer token added (a caller's own Authorization wins)."""
        out = dict(self._auth)
        for name, value in (headers or {}).items():
            out[name.lower() if name.lower() == "authorization" else name] = value
        return out or None

    def probe(self) -> dict[str, bool]:
        """`GET /health` through the handle: `{url: ok}`."""
        try:
            self.request("GET", "/health", timeout=min(self.timeout, 10.0))
            return {self.url: True}
        except RewardServiceError:
            return {self.url: False}

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"RayHandlePool({self.url!r}, timeout={self.timeout})"
