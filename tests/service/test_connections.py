"""Slow, stalled and malformed clients on real sockets: bounded, answered in JSON, no lockout."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from evolve_envs.reward.service.embedded import EmbeddedService
from tests.service.svc_helpers import painted_b64

MAX_CONNECTIONS = 20


@pytest.fixture(scope="module")
def strict_service() -> Iterator[EmbeddedService]:
    with EmbeddedService(
        "mock",
        extra_args=["--read-timeout-s", "1", "--max-connections", str(MAX_CONNECTIONS)],
    ) as svc:
        yield svc


def _connect(svc: EmbeddedService, payload: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", svc.port), timeout=15)
    if payload:
        sock.sendall(payload)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (bounded by the socket's 15 s timeout)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _json_error(raw: bytes, status: int) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d" % status), raw[:200]
    assert b"application/json" in head.lower()
    return json.loads(body)


def test_stalled_connections_are_answered_and_closed(strict_service: EmbeddedService) -> None:
    headers_only = b"POST /pairwise-critic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
    partial_body = headers_only + b"\r\n" + b'{"task": "t", '
    stalled = (
        [_connect(strict_service) for _ in range(6)]
        + [_connect(strict_service, headers_only) for _ in range(6)]
        + [_connect(strict_service, partial_body) for _ in range(6)]
    )
    try:
        # Over the connection cap (18 + 4 > 20): refused with a JSON 503, not held open.
        extra = [_connect(strict_service) for _ in range(4)]
        answers = [_read_all(sock) for sock in extra]
        refused = [raw for raw in answers if raw.startswith(b"HTTP/1.1 503")]
        assert len(refused) >= 2, answers
        for raw in refused:
            assert "too many connections" in _json_error(raw, 503)["error"]
        for raw in answers:
            if raw not in refused:
                _json_error(raw, 408)
        # Each stalled one gets a 408 after the read timeout, then the connection closes.
        for sock in stalled:
            assert "within 1 seconds" in _json_error(_read_all(sock), 408)["error"]
    finally:
        for sock in stalled + extra:
            sock.close()
    with httpx.Client(base_url=strict_service.url, timeout=30, trust_env=False) as http:
        body = {"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(30)}
        assert http.post("/pairwise-critic", json=body).status_code == 200


def test_malformed_http_gets_a_json_400(strict_service: EmbeddedService) -> None:
    sock = _connect(strict_service, b"NOT HTTP AT ALL\r\n\r\n")
    with sock:
        assert "malformed HTTP" in _json_error(_read_all(sock), 400)["error"]
