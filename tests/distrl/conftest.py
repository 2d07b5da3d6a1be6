"""Fixtures for the DistRL tests: one torch thread, and one local Ray instance for the session
(2 CPUs, 2 fake GPUs for resource accounting, no dashboard, a small object store)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The networks here are tiny: one thread is fastest and leaves the other cores alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ray_local() -> Iterator[object]:
    ray = pytest.importorskip("ray")
    own = not ray.is_initialized()  # another session fixture may have started Ray
    if own:
        # workers import the test env (tests.distrl.toy_env) by module name
        path = os.pathsep.join([str(ROOT), *[p for p in [os.environ.get("PYTHONPATH")] if p]])
        ray.init(
            address="local",  # a new local Ray, never a cluster left running here
            num_cpus=2,
            num_gpus=2,  # fake: nothing runs on them; the placement test checks Ray's accounting
            include_dashboard=False,
            object_store_memory=150 * 1024**2,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    yield ray
    if own:
        ray.shutdown()
