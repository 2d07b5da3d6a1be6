"""Fixtures for the reward service tests: real servers in child processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService


@pytest.fixture(scope="session")
def mock_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    """Mock backend with fault injection, a failure marker, the pickle scorer at / too, and
    `/score` paths allowed inside the test session's temporary directory."""
    svc = EmbeddedService(
        "mock",
        {"latency_ms": 2, "fail_marker": "__fail__"},
        enable_faults=True,
        extra_args=[
            "--pickle-at-root",
            "--max-frames",
            "256",
            "--max-image-side",
            "1024",
            "--max-body-mb",
            "8",
            "--batch-window-ms",
            "10",
            "--video-dir",
            str(tmp_path_factory.getbasetemp()),
        ],
    )
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def default_service() -> Iterator[EmbeddedService]:
    """A mock server started with no options at all (for tests of the defaults)."""
    with EmbeddedService("mock") as svc:
        yield svc


@pytest.fixture()
def client(mock_service: EmbeddedService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mock_service.url, timeout=30.0, trust_env=False) as c:
        yield c
    # A test that armed a fault must not leak it to the next test.
    with httpx.Client(base_url=mock_service.url, timeout=10.0, trust_env=False) as c:
        c.delete("/admin/faults")
