"""Fixtures for the wrapper tests: real reward servers (mock backend, intensity rule) on loopback.

``mock_service``: the intensity rule, no latency (exact reward sequences over HTTP).
``slow_service``: the same with 25 ms per backend batch (async calls really are outstanding).
``progress_only_service``: pairwise and done switched off (a Robo-Dopamine-like backend).
All are session-scoped; tests that kill a server start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService


def _service(**kwargs) -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity", **kwargs}, enable_faults=False)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def mock_service() -> Iterator[EmbeddedService]:
    yield from _service(latency_ms=0)


@pytest.fixture(scope="session")
def slow_service() -> Iterator[EmbeddedService]:
    yield from _service(latency_ms=25)


@pytest.fixture(scope="session")
def progress_only_service() -> Iterator[EmbeddedService]:
    yield from _service(latency_ms=0, disabled=["pairwise", "done"])


@pytest.fixture()
def client(mock_service: EmbeddedService) -> Iterator[ProgressClient]:
    c = ProgressClient(mock_service.url, max_workers=4)
    try:
        yield c
    finally:
        c.close()
