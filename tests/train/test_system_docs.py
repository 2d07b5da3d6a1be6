"""The docstring examples of the DistRL system modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "evolve_envs.train.config",
    "evolve_envs.train.worker",
    "evolve_envs.train.worker_env",
    "evolve_envs.train.runtime.weight_registry",
    "evolve_envs.train.distrl.learner",
    "evolve_envs.train.run_log",
    "evolve_envs.train.checkpoint",
    "evolve_envs.train.distrl.algorithm",
    "evolve_envs.train.grpo.algorithm",
    "evolve_envs.train.driver",
    "evolve_envs.train.loop",
    "evolve_envs.wrappers.model_success_bonus",
    "evolve_envs.train.evaluation",
    "evolve_envs.train.policies.transformer",
    "evolve_envs.train.common.entropy_floor",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
