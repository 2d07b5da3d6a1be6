"""Admission caps in front of the application: concurrent requests and request bodies.

`ConcurrencyLimitMiddleware` answers 503 JSON with `Retry-After` past `limit` requests at once
(health and metrics probes pass);
`BodyLimitMiddleware` answers 413 JSON for a body over the limit and 503 with `Retry-After` when
the bodies in flight would pass `max_inflight_bytes` together (docs/hostile-input.md).

Example:
    >>> BodyLimitMiddleware(app=None, max_body_bytes=1024).limit
    1024
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "PROBES",
    "BodyLimitMiddleware",
    "BodyTooLargeError",
    "ConcurrencyLimitMiddleware",
    "InflightBodiesError",
]


#: the probes a busy service still answers: liveness (ours and VLAC's) and metrics, each a
#: constant-time answer with no model call, so an orchestrator or a client's health probe never
#: reads a service at its admission limit as down
PROBES: frozenset[tuple[str, str]] = frozenset(
    {("GET", "/health"), ("POST", "/healthcheck"), ("GET", "/metrics")}
)


class ConcurrencyLimitMiddleware:
    """ASGI middleware: at most `limit` requests in the application at once; more get 503 JSON.

    The ``(method, path)`` pairs of `exempt` (default: `PROBES`) pass without taking a place.
    """

    def __init__(
        self, app: ASGIApp, limit: int, exempt: frozenset[tuple[str, str]] = PROBES
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.app = app
        self.limit = int(limit)
        self.exempt = exempt
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            body = json.dumps(
                {"error": f"too many concurrent requests (limit {self.limit}); retry later"}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", b"1"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


class BodyTooLargeError(HTTPException):
    """Raised while reading a body larger than the limit (FastAPI re-raises HTTP exceptions, and
    the app's handler answers them as JSON)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than the limit of {limit} bytes")


class BodyLimitMiddleware:
    """ASGI middleware: a body over `max_body_bytes` answers 413, one that would take the bodies in
    flight past `max_inflight_bytes` 503 (a request alone always fits).

    A `Content-Length` over the limit is answered before reading; a chunked body raises
    `BodyTooLargeError` in the reading route once past it.
    """

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, max_inflight_bytes: int | None = None
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.max_inflight = max_inflight_bytes
        self.inflight = 0

    def _room_for(self, nbytes: int, held: int) -> bool:
        """Whether `nbytes` more may be held (a request holding `held` already)."""
        if self.max_inflight is None or self.inflight == held:
            return True  # nobody else holds anything: always let a lone request in
        return self.inflight + nbytes <= self.max_inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        declared = 0
        if length is not None:
            try:
                declared = max(0, int(length))
            except ValueError:
                declared = 0
            if declared > self.limit:
                response = JSONResponse(
                    {
                        "error": f"request body of {declared} bytes is larger than the "
                        f"limit of {self.limit} bytes",
                        "limit": self.limit,
                    },
                    status_code=413,
                )
                await response(scope, receive, send)
                return
        if not self._room_for(declared, 0):
            await self._busy(scope, receive, send)
            return
        held = declared
        self.inflight += held
        received = 0

        async def limited_receive() -> Message:
            nonlocal received, held
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError(self.limit)
                if received > held:  # no (or a short) Content-Length: count as it arrives
                    more = received - held
                    if not self._room_for(more, held):
                        raise InflightBodiesError(self.max_inflight or 0)
                    self.inflight += more
                    held = received
            return message

        try:
            await self.app(scope, limited_receive, send)
        finally:
            self.inflight -= held

    async def _busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = InflightBodiesError(self.max_inflight or 0)
        response = JSONResponse({"error": error.detail}, status_code=503, headers=error.headers)
        await response(scope, receive, send)


class InflightBodiesError(HTTPException):
    """The bodies of the requests in flight already hold the most bytes allowed (503)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            503,
            f"the requests in flight already hold {limit} bytes of bodies (the limit); retry later",
            headers={"retry-after": "1"},
        )
