"""The real LIBERO simulator behind LiberoEnv: spaces, orientation, success, bad input."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from evolve_envs.envs.libero import LiberoEnv
from evolve_envs.envs.libero_tasks import MAX_EPISODE_STEPS, SUITES

pytestmark = pytest.mark.libero

OPEN = np.array([0, 0, 0, 0, 0, 0, -1.0])


def test_gymnasium_check_env(libero_env: LiberoEnv) -> None:
    # The render check needs a human-mode window; rgb_array rendering is covered below.
    check_env(libero_env, skip_render_check=True)


def test_short_episode_spaces_and_language(libero_env: LiberoEnv) -> None:
    from libero.libero import benchmark

    expected = benchmark.get_benchmark_dict()["libero_10"]().get_task(0).language
    obs, info = libero_env.reset(seed=1)
    assert info["task_description"] == expected
    assert info["suite"] == "libero_10" and info["task_id"] == 0
    assert info["init_state_id"] == 0
    assert info["is_success"] is False
    for _ in range(3):
        obs, reward, terminated, truncated, info = libero_env.step(OPEN)
        assert libero_env.observation_space.contains(obs)
        assert obs["agentview_image"].shape == (128, 128, 3)
        assert obs["agentview_image"].dtype == np.uint8
        assert obs["wrist_image"].shape == (128, 128, 3)
        assert obs["state"].dtype == np.float32 and obs["state"].shape == (8,)
        assert reward == 0.0 and not terminated and not truncated
    assert np.array_equal(libero_env.render(), obs["agentview_image"])
    assert info["task_description"] == expected


def _object_centroid_row(env: LiberoEnv, joint: str, z: float, far: np.ndarray) -> float:
    """Row of the image region that changes when ``joint``'s object is placed at height ``z``."""
    sim = env.sim
    q = sim.data.get_joint_qpos(joint).copy()
    q[:3] = far
    sim.data.set_joint_qpos(joint, q)
    sim.forward()
    absent = env.refresh_observation()["agentview_image"].astype(np.int16)
    q[:3] = np.array([0.0, 0.0, z])
    sim.data.set_joint_qpos(joint, q)
    sim.forward()
    present = env.refresh_observation()["agentview_image"].astype(np.int16)
    changed = np.abs(present - absent).sum(axis=2) > 30
    assert changed.sum() > 5, "the object should be visible in the agentview camera"
    rows, _ = np.nonzero(changed)
    return float(rows.mean())


def test_images_are_upright(libero_env: LiberoEnv) -> None:
    """An object raised in the world must move *up* (to smaller row indices) in the image."""
    libero_env.reset(seed=2)
    far = np.array([5.0, 5.0, 0.5])  # well outside the camera's view
    low = _object_centroid_row(libero_env, "alphabet_soup_1_joint0", 0.50, far)
    high = _object_centroid_row(libero_env, "alphabet_soup_1_joint0", 0.80, far)
    assert high < low - 3, (high, low)


def test_success_terminates(libero_env: LiberoEnv) -> None:
    """Goal of task 0: both the alphabet soup and the tomato sauce in the basket."""
    libero_env.reset(seed=3)
    sim = libero_env.sim
    basket = sim.data.get_joint_qpos("basket_1_joint0")[:3].copy()
    for joint, dx in (("alphabet_soup_1_joint0", -0.03), ("tomato_sauce_1_joint0", 0.03)):
        q = sim.data.get_joint_qpos(joint).copy()
        q[:3] = basket + np.array([dx, 0.0, 0.08])
        sim.data.set_joint_qpos(joint, q)
    sim.forward()
    _, reward, terminated, truncated, info = libero_env.step(OPEN)
    assert terminated and info["is_success"] and reward == 1.0 and not truncated


def test_failure_does_not_terminate_after_moving_one_object(libero_env: LiberoEnv) -> None:
    libero_env.reset(seed=4)
    sim = libero_env.sim
    basket = sim.data.get_joint_qpos("basket_1_joint0")[:3].copy()
    q = sim.data.get_joint_qpos("alphabet_soup_1_joint0").copy()
    q[:3] = basket + np.array([0.0, 0.0, 0.08])
    sim.data.set_joint_qpos("alphabet_soup_1_joint0", q)
    sim.forward()
    _, reward, terminated, _, info = libero_env.step(OPEN)
    assert not terminated and not info["is_success"] and reward == 0.0


def test_out_of_range_actions_are_clipped(libero_env: LiberoEnv) -> None:
    big = np.array([3.0, -2.0, 1.5, 0.0, 0.0, 9.0, 4.0])

    def state_after(action: np.ndarray) -> np.ndarray:
        libero_env.reset(options={"init_state_id": 1})
        libero_env.step(action)
        return libero_env.get_sim_state()

    after_big = state_after(big)
    after_clipped = state_after(np.clip(big, -1.0, 1.0))
    np.testing.assert_allclose(after_big, after_clipped, atol=1e-9)
    assert not np.allclose(state_after(OPEN), after_clipped, atol=1e-4)


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (np.zeros(6), r"shape \(7,\)"),
        (np.zeros((1, 7)), r"shape \(7,\)"),
        (np.array([0, 0, np.nan, 0, 0, 0, 0]), "NaN or inf"),
        (np.array([0, 0, 0, np.inf, 0, 0, 0]), "NaN or inf"),
        (["a"] * 7, "numeric"),
    ],
)
def test_bad_actions_raise(libero_env: LiberoEnv, action: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        libero_env.step(action)


def test_init_state_selection(libero_env: LiberoEnv) -> None:
    _, info = libero_env.reset(options={"init_state_id": 7})
    assert info["init_state_id"] == 7
    with pytest.raises(ValueError, match="out of range"):
        libero_env.reset(options={"init_state_id": 50})
    _, info = libero_env.reset()  # back to the env's fixed id
    assert info["init_state_id"] == 0


def test_unknown_suite_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="libero_spatial") as err:
        LiberoEnv("libero_11")
    assert all(s in str(err.value) for s in SUITES)


@pytest.mark.parametrize("task", [10, -1, "no_such_task", 2.5])
def test_unknown_task_lists_valid_ones(task: object) -> None:
    with pytest.raises(ValueError, match="LIVING_ROOM_SCENE2_put_both"):
        LiberoEnv("libero_10", task_id=task)  # type: ignore[arg-type]


def test_task_by_name_and_language() -> None:
    by_id = LiberoEnv("libero_goal", task_id=8)
    assert LiberoEnv("libero_goal", task_id=by_id.task_name).task_id == 8
    assert LiberoEnv("libero_goal", task_id="put the bowl on the plate").task_id == 8


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cameras": ("front",)},
        {"cameras": ()},
        {"image_size": 3},
        {"image_orientation": "sideways"},
        {"init_state": "first"},
        {"num_settle_steps": -1},
        {"render_mode": "human"},
    ],
)
def test_bad_options_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LiberoEnv("libero_10", **kwargs)


def test_ordered_init_states_cycle() -> None:
    env = LiberoEnv("libero_10", task_id=0, init_state="ordered")
    ids = [env._choose_init_state(None) for _ in range(3)]
    assert ids == [0, 1, 2]


def test_spaces_need_no_simulator() -> None:
    env = LiberoEnv("libero_object", task_id=1, cameras=("wrist",), image_size=(96, 64))
    assert env._sim_env is None
    assert set(env.observation_space.spaces) == {"wrist_image", "state"}
    assert env.observation_space["wrist_image"].shape == (96, 64, 3)
    assert MAX_EPISODE_STEPS["libero_10"] == 520


def test_missing_libero_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "libero.libero", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install 'evolve-envs\[libero\]'"):
        LiberoEnv("libero_10", 0)
