"""Fixtures for the reward client tests: real reward servers (mock backend) on loopback.

Two session-scoped servers with fault injection enabled (``server_a``, ``server_b``) and a
factory for endpoint pools with short timeouts that are closed after each test. Every test
leaves both servers without an armed fault. Helpers live in ``client_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.reward.clients.client_helpers import clear_fault


@pytest.fixture(scope="session")
def server_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    # /score path mode reads only inside the directories the operator names
    video_dir = ["--video-dir", str(tmp_path_factory.getbasetemp())]
    with EmbeddedService("mock", enable_faults=True, extra_args=video_dir) as service:
        yield service


@pytest.fixture(scope="session")
def server_b() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", enable_faults=True) as service:
        yield service


@pytest.fixture(autouse=True)
def _no_fault_left_armed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("server_a", "server_b"):
        if name in request.fixturenames:
            clear_fault(request.getfixturevalue(name))


@pytest.fixture
def make_pool() -> Iterator[Callable[..., EndpointPool]]:
    """Factory for pools with test-friendly timeouts; all are closed after the test."""
    pools: list[EndpointPool] = []

    def factory(endpoints: Any, **kwargs: Any) -> EndpointPool:
        settings: dict[str, Any] = {
            "timeout": 5.0,
            "connect_timeout": 2.0,
            "max_retries": 1,
            "backoff_s": 0.05,
            "max_backoff_s": 0.2,
            "probe_interval_s": 0.5,
            "probe_timeout_s": 1.0,
        }
        settings.update(kwargs)
        pool = EndpointPool(endpoints, **settings)
        pools.append(pool)
        return pool

    yield factory
    for pool in pools:
        pool.close()
