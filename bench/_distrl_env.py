"""Registers ``DistrlBench-v0`` (bench/_common.BenchEnv with a fixed episode length) for the
DistRL benchmarks; Ray workers reach it as ``env.id: _distrl_env:DistrlBench-v0`` with ``bench/``
on their ``PYTHONPATH`` (see :func:`ray_env`).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
from _common import ROOT, BenchEnv

ENV_ID = "_distrl_env:DistrlBench-v0"


def ray_env() -> dict[str, Any]:
    """``runtime_env`` that lets Ray workers import the project and ``bench/``."""
    paths = [str(ROOT), str(ROOT / "bench"), *[p for p in [os.environ.get("PYTHONPATH")] if p]]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


def _make(length: int = 10, **kwargs: Any) -> gym.Env:
    return gym.wrappers.TimeLimit(BenchEnv(**kwargs), max_episode_steps=length)


gym.register("DistrlBench-v0", entry_point=_make, disable_env_checker=True)
