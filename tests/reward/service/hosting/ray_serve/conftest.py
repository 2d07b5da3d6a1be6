"""Fixtures for the Ray Serve tests: one local Ray (2 CPUs, small object store) and one Serve app,
for this folder only (shut down after it, so that later folders start their own Ray).

The Serve application is the reward service with the mock backend on 2 replicas, configured like
the `mock_service` fixture of `tests/reward` so that the route tests run against it unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers.svc_helpers import free_port

HERE = Path(__file__).resolve().parent
TEST_PATHS = [str(HERE), str(HERE.parent), str(HERE.parents[4])]


APP_NAME = "reward_test"


@dataclass(frozen=True)
class ServeService:
    """Where the test Serve application answers."""

    url: str
    app_name: str
    handle: object


@pytest.fixture(scope="package")
def serve_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeService]:
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve", reason="ray[serve] is not importable (serve extra)")
    from evolve_envs.reward.service.hosting.ray_serve import build_app

    # Ray workers import the test modules' helpers (actors defined in tests) by module name.
    path = os.pathsep.join(TEST_PATHS + [p for p in [os.environ.get("PYTHONPATH")] if p])
    own_ray = not ray.is_initialized()  # another session fixture may have started Ray
    if own_ray:
        ray.init(
            address="local",  # a new local Ray, never a cluster left running here
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=150 * 1024**2,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = build_app(
            {
                "backend": "mock",
                "backend_kwargs": {"latency_ms": 2, "fail_marker": "__fail__"},
                "replicas": 2,
                "num_cpus": 0.5,
                "enable_faults": True,
                "pickle_at_root": True,
                "max_frames": 256,
                "max_image_side": 1024,
                "max_body_bytes": 8 * 1024 * 1024,
                "batch_window_ms": 10,
                "video_dirs": [str(tmp_path_factory.getbasetemp())],
            }
        )
        handle = serve.run(app, name=APP_NAME, route_prefix="/")
        yield ServeService(f"http://127.0.0.1:{port}", APP_NAME, handle)
    finally:
        if own_ray:
            serve.shutdown()
            ray.shutdown()
        else:
            serve.delete(APP_NAME)


@pytest.fixture()
def mock_service(serve_service: ServeService) -> ServeService:
    """The route tests' service fixture, here the Serve application."""
    return serve_service


@pytest.fixture()
def client(serve_service: ServeService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serve_service.url, timeout=30.0, trust_env=False) as c:
        yield c


@pytest.fixture()
def http(client: httpx.Client) -> httpx.Client:
    """The compatibility tests' client fixture, here pointed at the Serve application."""
    return client
