"""One real LIBERO env for the whole test session (building one costs ~10 s and ~2.5 GB on CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evolve_envs.envs.libero import LiberoEnv


@pytest.fixture(scope="session")
def libero_env() -> Iterator[LiberoEnv]:
    env = LiberoEnv("libero_10", task_id=0, image_size=128, init_state=0, num_settle_steps=5)
    env.reset(seed=0)
    yield env
    env.close()
