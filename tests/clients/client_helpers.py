"""Helpers for the reward client tests (``from tests.clients.client_helpers import ...``).

Painting frames for the mock backend's intensity rule, a free port, the fault admin API of
the reward server, its metrics, and a hang guard for calls that must return.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from evolve_envs.reward.service.backends.mock import paint_level
from evolve_envs.reward.service.embedded import EmbeddedService

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
