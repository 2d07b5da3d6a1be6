"""Helpers for the reward client tests (``from tests.reward.clients.client_helpers import ...``).

Painting frames for the mock backend's intensity rule, a free port, the fault admin API of
the reward server, its metrics, a hang guard for calls that must return, and a hostile HTTP
server whose answers a test sets route by route.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest

from evolve_envs.reward.service.backends.mock import paint_level
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

HANG_GUARD_S = 60.0


def paint(progress: float, shape: tuple[int, ...] = (32, 32, 3)) -> np.ndarray:
    """A frame the mock backend's intensity rule reads as ``progress`` percent."""
    return np.full(shape, paint_level(progress), np.uint8)


def free_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def arm_fault(server: EmbeddedService, **spec: Any) -> dict[str, Any]:
    response = httpx.post(server.url + "/admin/faults", json=spec, trust_env=False, timeout=10)
    response.raise_for_status()
    return response.json()


def clear_fault(server: EmbeddedService) -> dict[str, Any]:
    response = httpx.delete(server.url + "/admin/faults", trust_env=False, timeout=10)
    response.raise_for_status()
    return response.json()


def fault_status(server: EmbeddedService) -> dict[str, Any]:
    response = httpx.get(server.url + "/admin/faults", trust_env=False, timeout=10)
    response.raise_for_status()
    return response.json()


def server_metrics(server: EmbeddedService) -> dict[str, Any]:
    response = httpx.get(server.url + "/metrics", trust_env=False, timeout=10)
    response.raise_for_status()
    return response.json()


def within_guard(fn: Callable[[], Any], seconds: float = HANG_GUARD_S) -> Any:
    """Run ``fn`` in a thread and return its result; fail the test if it hangs.

    A generous guard against hangs, not a speed assertion.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"call did not return within the {seconds:.0f} s hang guard")
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass(frozen=True)
class Answer:
    """What `HostileHTTPServer` answers on one route: status, headers and body, sent at once
    or (``drip_s > 0``) one byte every ``drip_s`` seconds: the whole answer, or only the body
    (``headers_at_once``). A ``content-length`` header is added unless ``headers`` has one."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    drip_s: float = 0.0
    headers_at_once: bool = False


class HostileHTTPServer:
    """A real HTTP server on 127.0.0.1 (stdlib ``http.server``, a thread per connection) that
    answers each route as a test sets it in ``answers`` (an `Answer`; other routes: 404).

    Used as a context manager; ``url`` is its base URL, ``requests`` the paths it was asked.
    """

    def __init__(self) -> None:
        import http.server

        self.answers: dict[str, Answer] = {}
        self.requests: list[str] = []
        self._stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                server.requests.append(self.path)
                answer = server.answers.get(self.path.split("?")[0], Answer(404))
                headers = {"content-length": str(len(answer.body)), **answer.headers}
                head = f"HTTP/1.1 {answer.status} X\r\n" + "".join(
                    f"{k}: {v}\r\n" for k, v in headers.items()
                )
                head_bytes = head.encode() + b"\r\n"
                try:
                    if answer.drip_s <= 0:
                        self.wfile.write(head_bytes + answer.body)
                        return
                    slow = answer.body
                    if answer.headers_at_once:
                        self.wfile.write(head_bytes)
                    else:
                        slow = head_bytes + slow
                    for i in range(len(slow)):
                        self.wfile.flush()
                        if server._stop.wait(answer.drip_s):
                            break
                        self.wfile.write(slow[i : i + 1])
                    self.close_connection = True
                except OSError:  # the client gave up (what a hostile server would see)
                    self.close_connection = True

            do_GET = do_POST = _answer  # noqa: N815

            def handle(self) -> None:
                try:
                    super().handle()
                except OSError:  # a client that dropped the connection (on purpose)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> HostileHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
