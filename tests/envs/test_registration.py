"""gym.make / gym.make_vec over the registered ids, and the missing-GL error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import evolve_envs
from evolve_envs.envs.libero import LiberoEnv

pytestmark = pytest.mark.libero


def test_ids_registered() -> None:
    assert set(evolve_envs.ENV_IDS) <= set(gym.registry)
    assert gym.spec("evolve_envs/LIBERO-Goal-v0").kwargs["suite"] == "libero_goal"


def test_gym_make_applies_suite_time_limit() -> None:
    env = gym.make("evolve_envs/LIBERO-Spatial-v0", task_id=2, reward_model={"enable": False})
    try:
        assert isinstance(env.unwrapped, LiberoEnv)
        assert env.unwrapped.suite == "libero_spatial" and env.unwrapped.task_id == 2
        limits = []
        inner = env
        while isinstance(inner, gym.Wrapper):
            if isinstance(inner, gym.wrappers.TimeLimit):
                limits.append(inner._max_episode_steps)
            inner = inner.env
        assert limits == [220, 220]  # Gymnasium's (the registered limit), then the stack's
    finally:
        env.close()


def test_make_vec_async_steps_and_closes() -> None:
    envs = gym.make_vec(
        "evolve_envs/LIBERO-10-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn"},
        task_id=0,
        image_size=64,
        num_settle_steps=1,
        reward_model={"enable": False},
    )
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert obs["agentview_image"].shape == (2, 64, 64, 3)
        assert obs["agentview_image"].dtype == np.uint8
        assert len(set(infos["init_state_id"].tolist())) >= 1
        actions = np.tile(np.array([0, 0, 0, 0, 0, 0, -1.0], dtype=np.float32), (2, 1))
        for _ in range(3):
            obs, rewards, terms, truncs, infos = envs.step(actions)
        assert rewards.shape == (2,) and not terms.any() and not truncs.any()
        assert (
            list(infos["task_description"])
            == ["put both the alphabet soup and the tomato sauce in the basket"] * 2
        )
    finally:
        envs.close()
    assert envs.closed


def test_fork_after_gl_fails_fast_with_advice(libero_env: LiberoEnv) -> None:
    """This process owns a GL context (the session env): a forked worker must not hang."""
    assert libero_env.sim is not None
    envs = gym.make_vec(
        "evolve_envs/LIBERO-10-v0",
        num_envs=1,
        vectorization_mode="async",
        vector_kwargs={"context": "fork"},
        image_size=32,
        reward_model={"enable": False},
    )
    try:
        with pytest.raises(RuntimeError, match="context': 'spawn'"):
            envs.reset(seed=0)
    finally:
        envs.close(terminate=True)


def test_missing_gl_library_names_packages(tmp_path: Path) -> None:
    """An unloadable libEGL (as on a machine without Mesa's EGL) gives an actionable error."""
    (tmp_path / "libEGL.so.1").write_bytes(b"")
    (tmp_path / "libEGL.so").write_bytes(b"")
    code = (
        "from evolve_envs.envs.libero import LiberoEnv\n"
        "LiberoEnv('libero_10', 0, image_size=32).reset()\n"
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "MUJOCO_GL": "egl"}
    env.pop("PYOPENGL_PLATFORM", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "RuntimeError: MuJoCo could not create an offscreen OpenGL context" in proc.stderr
    assert "apt-get install libegl1" in proc.stderr


def test_triton_imported_after_the_simulator_does_not_crash() -> None:
    """Triton loaded after Mesa's libLLVM segfaults; creating the env preloads it if installed."""
    pytest.importorskip("triton")
    code = (
        "from evolve_envs.envs.libero import LiberoEnv\n"
        "env = LiberoEnv('libero_10', 0, image_size=32)\n"
        "obs, _ = env.reset(seed=0)\n"
        "import torch, triton, triton._C.libtriton\n"
        "print('ok', obs['agentview_image'].shape)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok (32, 32, 3)")
