"""Connection hygiene for uvicorn's HTTP/1.1 protocol: header/read deadlines (408), a connection
cap below `RLIMIT_NOFILE` that evicts stalled connections (503), JSON 400 for malformed HTTP
(docs/reward-service.md, "Connections").

Example:
    >>> protocol = bounded_h11_protocol(read_timeout_s=30.0, max_connections=512)
    >>> protocol.read_timeout_s, protocol.header_timeout_s, protocol.max_connections
    (30.0, 10.0, 512)
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "bounded_h11_protocol",
    "connection_cap",
    "listen_backlog",
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


def connection_cap(max_connections: int, headroom: int = 64) -> int:
    """`max_connections`, lowered to leave `headroom` of the process's file descriptors
    (`RLIMIT_NOFILE`, soft limit) free; at least 1.

    With `ulimit -n 128` and the default headroom of 64, at most 64 connections are held.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    room = soft - headroom
    if room < 1:
        room = max(1, soft // 2)
        log.warning(
            "RLIMIT_NOFILE is %d, less than the connection headroom of %d: holding at most %d "
            "connections",
            soft,
            headroom,
            room,
        )
    if room < max_connections:
        log.info(
            "holding at most %d connections (RLIMIT_NOFILE %d, %d kept free)", room, soft, headroom
        )
    return max(1, min(max_connections, room))


def listen_backlog(max_connections: int, headroom: int = 64, most: int = 2048) -> int:
    """The listening socket's backlog for `max_connections`: what the descriptors left allow,
    between 16 and `most` (connections + backlog must stay below `RLIMIT_NOFILE`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return most
    return max(16, min(most, soft - max_connections - headroom // 2))


class _BoundedH11Protocol(H11Protocol):
    read_timeout_s: float = 60.0
    header_timeout_s: float = 10.0
    max_connections: int = 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        self._request_started = asyncio.get_running_loop().time()
        self._last_active = time.monotonic_ns()  # the loop's clock is per iteration: ties
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._evict_one():
            log.warning("refusing a connection: %d open", len(self.connections))
            self._close_with(503, f"too many connections (limit {self.max_connections})")
            return
        self._arm_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._last_active = time.monotonic_ns()
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_read_timer()  # a new request on a kept-alive connection
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._waiting_for_headers:  # headers done: the body has until read_timeout_s
                self._schedule(self._request_started + self.read_timeout_s)
        elif state is not h11.IDLE:
            self._cancel_read_timer()  # the request is complete (or the connection is done)

    def on_response_complete(self) -> None:
        self._last_active = time.monotonic_ns()
        self._cancel_read_timer()
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        self._close_with(400, f"malformed HTTP request: {msg}")

    # --- eviction -------------------------------------------------------------------------
    def _evictable(self) -> bool:
        """No request of this connection is in the application: its headers are not finished,
        or it is idle between requests."""
        if self.transport.is_closing():
            return False
        cycle: Any = self.cycle
        return self.conn.their_state is h11.IDLE and (cycle is None or cycle.response_complete)

    def _evict_one(self) -> bool:
        """Close an evictable connection other than this one (stalled oldest first, then idle
        longest)."""
        others = [
            conn
            for conn in self.connections
            if conn is not self and isinstance(conn, _BoundedH11Protocol) and conn._evictable()
        ]
        if not others:
            return False
        victim = min(others, key=lambda conn: (conn._served_a_request, conn._last_active))
        victim._evict()
        return True

    @property
    def _served_a_request(self) -> bool:
        """It has completed a request and has not started sending another one."""
        return self.cycle is not None and not self.conn.trailing_data[0]

    def _evict(self) -> None:
        if self.cycle is None or self.conn.trailing_data[0]:  # stalled before a request
            log.info("closing a stalled connection to make room for a new one")
            self._close_with(503, "connection closed: the server is at its connection limit")
        else:  # idle between requests: close quietly, as a keep-alive timeout would
            self._cancel_read_timer()
            self.transport.close()

    # --- deadlines ------------------------------------------------------------------------
    @property
    def _waiting_for_headers(self) -> bool:
        return getattr(self, "_phase", "") == "headers"

    def _arm_read_timer(self) -> None:
        self._request_started = self.loop.time()
        self._schedule(self._request_started + min(self.header_timeout_s, self.read_timeout_s))
        self._phase = "headers"

    def _schedule(self, when: float) -> None:
        self._cancel_read_timer()
        self._phase = "body"
        self._read_timer = self.loop.call_at(when, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        timer = getattr(self, "_read_timer", None)
        if timer is not None:
            timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        headers = self._waiting_for_headers
        timeout = (
            min(self.header_timeout_s, self.read_timeout_s) if headers else self.read_timeout_s
        )
        log.info(
            "closing a connection that sent no complete request %s in %.0f s",
            "header" if headers else "body",
            timeout,
        )
        cycle: Any = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        what = "request headers" if headers else "request"
        self._close_with(408, f"{what} not received completely within {timeout:g} seconds")

    def _close_with(self, status: int, message: str) -> None:
        self._cancel_read_timer()
        try:
            self.transport.write(raw_json_response(status, message))
        finally:
            self.transport.close()


def bounded_h11_protocol(
    *, read_timeout_s: float = 60.0, header_timeout_s: float = 10.0, max_connections: int = 1024
) -> type[H11Protocol]:
    """uvicorn `http=` protocol class with these limits (see the module docs)."""
    if not read_timeout_s > 0 or not header_timeout_s > 0 or max_connections < 1:
        raise ValueError("read_timeout_s and header_timeout_s must be > 0 and max_connections >= 1")
    return type(
        "BoundedH11Protocol",
        (_BoundedH11Protocol,),
        {
            "read_timeout_s": float(read_timeout_s),
            "header_timeout_s": float(header_timeout_s),
            "max_connections": int(max_connections),
        },
    )
