"""Connection hygiene for uvicorn's HTTP/1.1 protocol: read deadlines, a connection cap, JSON
errors at the protocol level.

uvicorn closes *idle keep-alive* connections, but not a connection that never sends a request,
stops half-way through its headers, or trickles its body. `bounded_h11_protocol(...)` returns a
subclass of uvicorn's h11 protocol that

* gives every request `read_timeout_s` seconds from its first byte (or from the connection's
  opening) until its body is complete, then answers `408` (JSON) and closes the connection;
* refuses connections beyond `max_connections` with `503` (JSON) at once, so stalled sockets
  cannot use up the process's file descriptors;
* answers malformed HTTP with a JSON `400` instead of uvicorn's plain text.

In the application, `ConcurrencyLimitMiddleware` caps concurrent requests (`503` JSON with
`Retry-After`, which clients retry) and `BodyLimitMiddleware` request bodies (`413` JSON, from
`Content-Length` before reading, or once the bytes read pass the limit).

Example:
    >>> protocol = bounded_h11_protocol(read_timeout_s=30.0, max_connections=512)
    >>> protocol.read_timeout_s, protocol.max_connections
    (30.0, 512)
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import h11
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "bounded_h11_protocol",
    "BodyLimitMiddleware",
    "BodyTooLargeError",
    "ConcurrencyLimitMiddleware",
    "raw_json_response",
]

log = logging.getLogger("evolve_envs.reward.service")

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 503: b"Service Unavailable"}


def raw_json_response(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 response with a JSON error body that closes the connection."""
    body = json.dumps({"error": message}).encode()
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, _REASONS.get(status, b"Error"), len(body))
    )
    return head + body


class _BoundedH11Protocol(H11Protocol):
    read_timeout_s: float = 60.0
    max_connections: int = 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("refusing a connection: %d open", len(self.connections))
            self._close_with(503, f"too many connections (limit {self.max_connections})")
            return
        self._arm_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_read_timer()  # a new request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._cancel_read_timer()  # the request is complete (or the connection is done)

    def on_response_complete(self) -> None:
        self._cancel_read_timer()
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        self._close_with(400, f"malformed HTTP request: {msg}")

    # --- internals ------------------------------------------------------------------------
    def _arm_read_timer(self) -> None:
        self._cancel_read_timer()
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        timer = getattr(self, "_read_timer", None)
        if timer is not None:
            timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        log.info(
            "closing a connection that sent no complete request in %.0f s", self.read_timeout_s
        )
        cycle: Any = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        self._close_with(
            408, f"request not received completely within {self.read_timeout_s:g} seconds"
        )

    def _close_with(self, status: int, message: str) -> None:
        try:
            self.transport.write(raw_json_response(status, message))
        finally:
            self.transport.close()


def bounded_h11_protocol(
    *, read_timeout_s: float = 60.0, max_connections: int = 1024
) -> type[H11Protocol]:
    """uvicorn `http=` protocol class with these limits (see the module docs)."""
    if not read_timeout_s > 0 or max_connections < 1:
        raise ValueError("read_timeout_s must be > 0 and max_connections >= 1")
    return type(
        "BoundedH11Protocol",
        (_BoundedH11Protocol,),
        {"read_timeout_s": float(read_timeout_s), "max_connections": int(max_connections)},
    )


class ConcurrencyLimitMiddleware:
    """ASGI middleware: at most `limit` requests in the application at once; more get 503 JSON.

    Example:
        >>> ConcurrencyLimitMiddleware(app=None, limit=256).limit
        256
    """

    def __init__(self, app: Any, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.app = app
        self.limit = int(limit)
        self.active = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
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
    """ASGI middleware: request bodies over `max_body_bytes` answer 413 JSON.

    A `Content-Length` over the limit is answered before the body is read; a body that grows
    past it while read (chunked) raises `BodyTooLargeError` in the reading route.

    Example:
        >>> BodyLimitMiddleware(app=None, max_body_bytes=1024).limit
        1024
    """

    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.limit
            except ValueError:
                too_big = False
            if too_big:
                response = JSONResponse(
                    {
                        "error": f"request body of {int(length)} bytes is larger than the "
                        f"limit of {self.limit} bytes",
                        "limit": self.limit,
                    },
                    status_code=413,
                )
                await response(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError(self.limit)
            return message

        await self.app(scope, limited_receive, send)
