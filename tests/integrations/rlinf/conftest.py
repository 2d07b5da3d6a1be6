"""Fixtures for the RLinf integration tests.

``mock_service`` (tests/conftest.py): a real reward server (mock backend, *intensity* rule, no
latency) on loopback, session-scoped. ``standin_env`` lives next to this file (an
RLinf-``LiberoEnv``-shaped vector env with painted frames).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService


@pytest.fixture()
def client(mock_service: EmbeddedService) -> Iterator[ProgressClient]:
    c = ProgressClient(mock_service.url, max_workers=8)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(autouse=True)
def private_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLinf's Cluster first joins any Ray running on the machine (``address="auto"``): another
    test process's cluster, which may stop under it. ``RAY_ADDRESS=local`` starts its own."""
    monkeypatch.setenv("RAY_ADDRESS", "local")


@pytest.fixture(autouse=True, scope="module")
def no_ray_left_running() -> None:
    """RLinf's Cluster refuses a Ray that someone else initialised: shut down a session left by
    another test package (the DistRL tests keep one for the session)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
