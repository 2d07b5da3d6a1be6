"""One local Ray instance for the DistRL tests (2 CPUs, no dashboard, a small object store)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_local() -> Iterator[object]:
    ray = pytest.importorskip("ray")
    own = not ray.is_initialized()  # another session fixture may have started Ray
    if own:
        # workers import the test env (tests.distrl.toy_env) by module name
        path = os.pathsep.join([str(ROOT), *[p for p in [os.environ.get("PYTHONPATH")] if p]])
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=150 * 1024**2,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    yield ray
    if own:
        ray.shutdown()
