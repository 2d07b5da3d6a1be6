"""Slow, stalled and malformed clients on real sockets: bounded, answered in JSON, no lockout."""

from __future__ import annotations

import json
import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted_b64

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


def _read_response(sock: socket.socket) -> bytes:
    """One small response on a kept-alive connection (headers, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
        ).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _json_error(raw: bytes, status: int) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d" % status), raw[:200]
    assert b"application/json" in head.lower()
    return json.loads(body)


_HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def _get_health(svc: EmbeddedService) -> bytes:
    """A complete `GET /health` on a new raw connection; what the server answers."""
    sock = _connect(svc, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    with sock:
        return _read_all(sock)


def test_stalled_connections_make_room_for_new_ones(strict_service: EmbeddedService) -> None:
    headers_only = b"POST /pairwise-critic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
    partial_body = headers_only + b"\r\n" + b'{"task": "t", '
    kept_alive = _connect(strict_service, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert _read_response(kept_alive).startswith(b"HTTP/1.1 200")
    silent = [_connect(strict_service) for _ in range(6)]
    half_headers = [_connect(strict_service, headers_only) for _ in range(6)]
    half_body = [_connect(strict_service, partial_body) for _ in range(6)]
    stalled = silent + half_headers + half_body
    try:
        # 1 kept alive + 18 stalled + 4 new > 20: the new ones are served; the oldest stalled
        # connections without a request in progress (the silent ones) are closed for them, not
        # the kept-alive one, although it has been quiet longest.
        new = [_connect(strict_service) for _ in range(4)]
        time.sleep(0.3)  # all of them accepted before the first one's request frees a place
        for sock in new:
            with sock:
                sock.sendall(_HEALTH)
                raw = _read_all(sock)
                assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
        answers = {id(sock): _read_all(sock) for sock in stalled}
        evicted = [s for s in stalled if answers[id(s)].startswith(b"HTTP/1.1 503")]
        assert len(evicted) == 3 and evicted == silent[:3], [answers[id(s)][:12] for s in stalled]
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _read_response(kept_alive).startswith(b"HTTP/1.1 200")
        for sock in evicted:
            assert "connection limit" in _json_error(answers[id(sock)], 503)["error"]
        # The others get a 408 after the deadline (headers, or the whole request), then close.
        for sock in stalled:
            if sock in evicted:
                continue
            error = _json_error(answers[id(sock)], 408)["error"]
            what = "request not" if sock in half_body else "request headers not"
            assert error.startswith(what) and "within 1 seconds" in error, error
    finally:
        for sock in [*stalled, kept_alive]:
            sock.close()
    with httpx.Client(base_url=strict_service.url, timeout=30, trust_env=False) as http:
        body = {"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(30)}
        assert http.post("/pairwise-critic", json=body).status_code == 200


def test_new_connection_refused_when_every_connection_has_a_request(
    strict_service: EmbeddedService,
) -> None:
    partial_body = (
        b"POST /pairwise-critic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{"
    )
    busy = [_connect(strict_service, partial_body) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # the server has read every one of them
        with _connect(strict_service) as sock:  # refused on arrival (nothing sent: no reset)
            raw = _read_all(sock)
        assert "too many connections" in _json_error(raw, 503)["error"]
    finally:
        for sock in busy:
            sock.close()
    deadline = time.monotonic() + 10
    while not _get_health(strict_service).startswith(b"HTTP/1.1 200"):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _nofile_128() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def test_valid_request_answered_beside_200_stalled_connections_at_nofile_128() -> None:
    """`prlimit --nofile=128` and 200 connections stalled in their headers: a valid request is
    still answered within 1 s (stalled connections are evicted, the cap stays below the fd
    limit)."""
    with EmbeddedService("mock", preexec_fn=_nofile_128) as svc:
        stalled = []
        try:
            for _ in range(200):
                stalled.append(_connect(svc, b"POST /pairwise-critic HTTP/1.1\r\nHost: 1"))
            time.sleep(0.5)  # the server has accepted (and evicted) them
            with httpx.Client(base_url=svc.url, timeout=5, trust_env=False) as http:
                body = {"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(30)}
                for _ in range(3):
                    start = time.monotonic()
                    assert http.post("/pairwise-critic", json=body).status_code == 200
                    assert time.monotonic() - start < 1.0
        finally:
            for sock in stalled:
                sock.close()
        assert svc.is_running()


def test_malformed_http_gets_a_json_400(strict_service: EmbeddedService) -> None:
    sock = _connect(strict_service, b"NOT HTTP AT ALL\r\n\r\n")
    with sock:
        assert "malformed HTTP" in _json_error(_read_all(sock), 400)["error"]


def test_bodies_in_flight_are_held_to_their_total() -> None:
    """A body the other requests in flight leave no room for is 503 with `Retry-After` before
    it is read; a request without a body still passes, and the room returns once the request
    holding it is answered."""
    args = ["--max-inflight-body-mb", "1", "--read-timeout-s", "30"]
    with EmbeddedService("mock", extra_args=args) as svc:

        def post_head(length: int) -> socket.socket:
            head = (
                b"POST /pairwise-critic HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
            )
            return _connect(svc, head)

        holder = post_head(800_000)  # headers only: its body is on the way
        holder.sendall(b'{"task": "t", "image_a": "')
        time.sleep(0.3)  # the server has read the headers and holds the room
        with post_head(300_000) as second:
            error = _json_error(_read_response(second), 503)["error"]
        assert "bytes of bodies" in error
        raw = _get_health(svc)
        assert raw.startswith(b"HTTP/1.1 200"), raw[:100]
        holder.close()
        image = painted_b64(10)
        body = {"task": "t", "image_a": image, "image_b": image + " " * 300_000}
        for _ in range(50):  # the server notices the closed holder
            resp = httpx.post(svc.url + "/pairwise-critic", json=body, trust_env=False)
            if resp.status_code != 503:
                break
            time.sleep(0.1)
        assert resp.status_code == 200, resp.text[:200]
