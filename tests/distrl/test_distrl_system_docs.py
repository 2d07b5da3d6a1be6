"""The docstring examples of the DistRL system modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "evolve_envs.distrl.config",
    "evolve_envs.distrl.worker",
    "evolve_envs.distrl.learner",
    "evolve_envs.distrl.train_log",
    "evolve_envs.distrl.checkpoint",
    "evolve_envs.distrl.async_trainer",
    "evolve_envs.distrl.grpo_trainer",
    "evolve_envs.distrl.train",
    "evolve_envs.distrl.loop",
    "evolve_envs.distrl.shaping",
    "evolve_envs.distrl.evaluation",
    "evolve_envs.distrl.transformer_policy",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
