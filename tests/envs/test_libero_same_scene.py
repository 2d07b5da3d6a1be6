"""Same (suite, task, init state) → same rendered scene, fixtures included.

LIBERO places fixtures (cabinets, racks, stoves) on every reset from NumPy's global RNG, outside
the simulator state an init state restores. These tests compare first frames rendered from one
init state: in a fresh process, in this process after other resets with other seeds and init
states, and in two spawned vector-env workers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.envs.libero import LiberoEnv

pytestmark = [pytest.mark.libero, pytest.mark.slow]

#: Task 0 of every suite, and libero_goal task 7 (the cabinet and the wine rack are fixtures).
CASES: list[tuple[str, int]] = [
    ("libero_10", 0),
    ("libero_spatial", 0),
    ("libero_object", 0),
    ("libero_goal", 0),
    ("libero_90", 0),
    ("libero_goal", 7),
]
ENV_KWARGS = {"image_size": 96, "cameras": ("agentview",), "num_settle_steps": 3}

# Run in a fresh interpreter: one env at a time, the first reset of each, seed 123, init state 0.
_FRESH_PROCESS = """
import json, sys
import numpy as np
from evolve_envs.envs.libero import LiberoEnv
cases, kwargs, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
frames = {}
for suite, task in cases:
    env = LiberoEnv(suite, task_id=task, **kwargs)
    obs, info = env.reset(seed=123, options={"init_state_id": 0})
    frames[f"{suite}/{task}"] = obs["agentview_image"]
    env.close()
np.savez(out, **frames)
"""


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


@pytest.fixture(scope="module")
def fresh_process_frames(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("frames") / "fresh.npz"
    kwargs = {**ENV_KWARGS, "cameras": list(ENV_KWARGS["cameras"])}
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, json.dumps(CASES), json.dumps(kwargs), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as data:
        return {key: data[key] for key in data.files}


@pytest.mark.parametrize(("suite", "task"), CASES, ids=[f"{s}-{t}" for s, t in CASES])
def test_init_state_renders_the_same_scene_across_resets_and_processes(
    fresh_process_frames: dict[str, np.ndarray], suite: str, task: int
) -> None:
    env = LiberoEnv(suite, task_id=task, **ENV_KWARGS)
    np.random.seed(2024)  # whatever the caller does with the global RNG
    try:
        env.reset(seed=5, options={"init_state_id": 1})  # another init state and seed first
        obs, info = env.reset(seed=9, options={"init_state_id": 0})
        drawn = np.random.uniform(size=4)
    finally:
        env.close()
    assert info["init_state_id"] == 0
    fresh = fresh_process_frames[f"{suite}/{task}"]
    assert _max_abs_diff(obs["agentview_image"], fresh) <= 1
    # The placement draws from its own seed: the caller's global stream goes on untouched.
    np.random.seed(2024)
    assert np.array_equal(drawn, np.random.uniform(size=4))


def test_spawned_vector_workers_with_one_seed_render_the_same_scene() -> None:
    envs = gym.make_vec(
        "evolve_envs/LIBERO-Goal-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn"},
        task_id=7,
        image_size=64,
        num_settle_steps=1,
        reward_model={"enable": False},
    )
    try:
        obs, infos = envs.reset(seed=[123, 123])
    finally:
        envs.close()
    assert infos["init_state_id"][0] == infos["init_state_id"][1]
    frames = obs["agentview_image"]
    assert _max_abs_diff(frames[0], frames[1]) <= 1


def test_scene_seed_depends_on_task_and_init_state_only() -> None:
    a = LiberoEnv("libero_goal", task_id=7)
    b = LiberoEnv("libero_goal", task_id=a.task_name, image_size=64, init_state="ordered")
    assert a.scene_seed(3) == b.scene_seed(3) != a.scene_seed(4)
    assert a.scene_seed(3) != LiberoEnv("libero_goal", task_id=6).scene_seed(3)
