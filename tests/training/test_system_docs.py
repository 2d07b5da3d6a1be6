"""The docstring examples of the DistRL system modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "evolve_envs.training.config",
    "evolve_envs.training.worker",
    "evolve_envs.training.worker_env",
    "evolve_envs.training.runtime.weight_registry",
    "evolve_envs.training.distrl.learner",
    "evolve_envs.training.run_log",
    "evolve_envs.training.checkpoint",
    "evolve_envs.training.distrl.algorithm",
    "evolve_envs.training.grpo.algorithm",
    "evolve_envs.training.driver",
    "evolve_envs.training.loop",
    "evolve_envs.wrappers.model_success_bonus",
    "evolve_envs.training.evaluation",
    "evolve_envs.training.policies.transformer",
    "evolve_envs.training.common.entropy_floor",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
