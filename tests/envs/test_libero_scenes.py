"""LIBERO scene splits and the privileged state on the real simulator: ``init_state_ids`` limits
which init states an env plays, ``by_seed`` maps a reset seed to one of them, and
``privileged_state`` appends the goal object's and target's positions to the state."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from evolve_envs.envs.libero import LiberoEnv
from evolve_envs.envs.libero_expert import GOAL_STATE_DIM, ScriptedExpert
from evolve_envs.envs.libero_tasks import STATE_DIM, check_init_state_ids

pytestmark = pytest.mark.libero

HELD_OUT = list(range(30, 50))


@pytest.fixture(scope="module")
def env() -> Iterator[LiberoEnv]:
    env = LiberoEnv("libero_object", 0, cameras=("agentview",), image_size=32,
                    render_cameras="on_demand", init_state="by_seed",
                    init_state_ids=HELD_OUT, privileged_state=True)  # fmt: skip
    yield env
    env.close()


def test_a_seed_picks_its_scene_and_consecutive_seeds_cover_the_split(env: LiberoEnv) -> None:
    base = 2**31
    played = [env.reset(seed=base + k)[1]["init_state_id"] for k in range(len(HELD_OUT))]
    assert sorted(played) == HELD_OUT
    assert env.reset(seed=base + 3)[1]["init_state_id"] == played[3]
    unseeded = {env.reset()[1]["init_state_id"] for _ in range(6)}
    assert unseeded <= set(HELD_OUT)
    # an explicit id still plays any scene of the task
    assert env.reset(seed=0, options={"init_state_id": 2})[1]["init_state_id"] == 2


def test_the_privileged_state_follows_the_goal_object(env: LiberoEnv) -> None:
    assert env.observation_space["state"].shape == (STATE_DIM + GOAL_STATE_DIM,)
    obs, _ = env.reset(seed=5, options={"init_state_id": 5})
    problem = env.problem
    soup = problem.sim.data.body_xpos[problem.obj_body_id["alphabet_soup_1"]]
    basket = problem.sim.data.body_xpos[problem.obj_body_id["basket_1"]]
    np.testing.assert_allclose(obs["state"][STATE_DIM:], np.concatenate([soup, basket]), atol=1e-5)
    start = obs["state"][STATE_DIM : STATE_DIM + 3].copy()
    expert = ScriptedExpert(seed=5)
    expert.reset(env)
    for _ in range(280):
        obs, _, terminated, _, _ = env.step(expert.act(env))
        if terminated:
            break
    assert terminated
    moved = obs["state"][STATE_DIM : STATE_DIM + 3]
    assert np.linalg.norm(moved[:2] - obs["state"][STATE_DIM + 3 : STATE_DIM + 5]) < 0.05
    assert np.linalg.norm(moved - start) > 0.2  # the soup went from the table into the basket


def test_ordered_cycles_through_the_ids_only() -> None:
    env = LiberoEnv("libero_object", 0, cameras=("agentview",), image_size=32,
                    render_cameras="on_demand", init_state="ordered",
                    init_state_ids=[7, 3])  # fmt: skip
    try:
        assert [env.reset()[1]["init_state_id"] for _ in range(3)] == [7, 3, 7]
    finally:
        env.close()


@pytest.mark.parametrize("bad", [[], [1, 1], [-1], [True], ["3"]])
def test_bad_init_state_ids_are_refused(bad: list[object]) -> None:
    with pytest.raises(ValueError, match="init_state_ids"):
        check_init_state_ids(bad)  # type: ignore[arg-type]


def test_ids_beyond_the_task_are_refused_at_reset() -> None:
    env = LiberoEnv("libero_object", 0, cameras=("agentview",), image_size=32,
                    render_cameras="on_demand", init_state_ids=[10, 50])  # fmt: skip
    try:
        with pytest.raises(ValueError, match="out of range"):
            env.reset(seed=0)
    finally:
        env.close()
