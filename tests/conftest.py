"""Fixtures shared across the test folders, and the ``e2e`` / ``cluster`` markers by folder.

Real reward servers (mock backend, intensity rule) on loopback, session-scoped:
``mock_service`` (no latency: exact reward sequences over HTTP; ``intensity_service`` is the
same server), ``slow_service`` (25 ms per backend batch: async calls really are outstanding),
``progress_only_service`` (pairwise and done switched off, a Robo-Dopamine-like backend).
``tests/reward/conftest.py`` gives ``mock_service`` and ``client`` another meaning there (a server
with fault injection, an ``httpx`` client); ``intensity_service`` keeps its meaning everywhere.
Tests that kill a server start their own.

``libero_env``: one real LIBERO env for the session (building one costs ~10 s and ~2.5 GB on CPU).
``ray_local``: one local Ray instance (2 CPUs, 2 fake GPUs for resource accounting, no dashboard,
a small object store), started at its first use and kept until the end or until a folder that
needs Ray gone (tests/integrations/rlinf) shuts it down; the next use starts it again. Every
fixture here starts only when a test asks for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
#: test folders whose every test carries a marker: end-to-end across packages, multi-node Ray
FOLDER_MARKERS = {"e2e": "e2e", "cluster": "cluster"}


#: ``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``). Tests that
#: share a costly package or session fixture, or that shut down the worker's Ray, run on one worker
#: as one group: by folder, then by fixture; then a module's tests that share a module-scoped
#: fixture run on one worker, so that fixture (a training run, a server) is built once, not once on
#: each worker at the same time.
XDIST_FOLDERS = {
    ("tests", "cluster"): "cluster",
    ("tests", "integrations", "rlinf"): "rlinf",  # shuts the worker's Ray down
    ("tests", "reward", "service", "hosting", "ray_serve"): "ray_serve",
}
XDIST_FIXTURES = {"libero_env": "libero"}  # the others live in one folder each, grouped above


def _xdist_group(item: pytest.Item, parts: tuple[str, ...]) -> str | None:
    for folder, group in XDIST_FOLDERS.items():
        if parts[: len(folder)] == folder:
            return group
    names = getattr(item, "fixturenames", ())
    group = next((group for name, group in XDIST_FIXTURES.items() if name in names), None)
    if group is None and _uses_module_fixture(item):
        group = "/".join(parts)
    return group


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixtures of this test
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope == "module" for chain in defs for d in chain)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).resolve().relative_to(ROOT).parts
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[parts[1]])
        group = _xdist_group(item, parts)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _service(**kwargs) -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity", **kwargs}, enable_faults=False)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def intensity_service() -> Iterator[EmbeddedService]:
    """The painted grey level of a frame is the progress the model reads."""
    yield from _service(latency_ms=0)


@pytest.fixture(scope="session")
def mock_service(intensity_service: EmbeddedService) -> EmbeddedService:
    """The same server (tests/reward/conftest.py gives the name another one there)."""
    return intensity_service


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


@pytest.fixture(scope="session")
def libero_env() -> Iterator[object]:
    from evolve_envs.envs.libero import LiberoEnv

    env = LiberoEnv("libero_10", task_id=0, image_size=128, init_state=0, num_settle_steps=5)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.fixture()
def ray_local() -> object:
    """Ray in this process, started here unless it is up already (another fixture's, kept)."""
    return start_local_ray()


@pytest.fixture(scope="module")
def ray_module() -> object:
    """`ray_local` for a module-scoped fixture (one run shared by a module's tests)."""
    return start_local_ray()


def start_local_ray() -> object:
    """Ray in this process, started here unless it is up already."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():  # first use, or shut down by a folder that needs no Ray
        # workers import the test env (tests.helpers.toy_env) by module name
        path = os.pathsep.join([str(ROOT), *[p for p in [os.environ.get("PYTHONPATH")] if p]])
        ray.init(
            address="local",  # a new local Ray, never a cluster left running here
            num_cpus=2,
            num_gpus=2,  # fake: nothing runs on them; the placement test checks Ray's accounting
            include_dashboard=False,
            object_store_memory=150 * 1024**2,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    return ray
