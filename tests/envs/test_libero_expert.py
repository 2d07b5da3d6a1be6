"""The scripted LIBERO expert on the real simulator: it succeeds, and its failure rules do not."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from evolve_envs.envs.libero import LiberoEnv
from evolve_envs.envs.libero_expert import ScriptedExpert, pick_place_goal

pytestmark = pytest.mark.libero


@pytest.fixture(scope="module")
def env() -> Iterator[LiberoEnv]:
    env = LiberoEnv("libero_object", 0, cameras=("agentview",), image_size=32,
                    render_cameras="on_demand")  # fmt: skip
    yield env
    env.close()


def _play(env: LiberoEnv, behaviour: str, init: int, steps: int = 280) -> tuple[bool, str, int]:
    env.reset(seed=init, options={"init_state_id": init})
    expert = ScriptedExpert(behaviour, seed=init)
    expert.reset(env)
    for step in range(steps):
        action = expert.act(env)
        assert action.shape == (7,) and np.all(np.abs(action) <= 1.0)
        if env.step(action)[2]:
            return True, expert.phase, step
    return False, expert.phase, steps


def test_the_goal_is_read_from_the_task(env: LiberoEnv) -> None:
    env.reset(seed=0, options={"init_state_id": 0})
    goal = pick_place_goal(env.problem)
    assert (goal.obj, goal.target, goal.relation) == ("alphabet_soup_1", "basket_1", "in")


def test_the_expert_puts_the_soup_in_the_basket(env: LiberoEnv) -> None:
    succeeded, phase, steps = _play(env, "expert", 0)
    assert succeeded, phase
    assert steps < 280


@pytest.mark.parametrize("behaviour", ["wrong_object", "drop", "stall"])
def test_a_failure_rule_does_not_succeed(env: LiberoEnv, behaviour: str) -> None:
    succeeded, phase, _ = _play(env, behaviour, 1, steps=200)
    assert not succeeded, phase


def test_a_goal_the_expert_cannot_do_is_refused_in_one_line() -> None:
    class Problem:
        parsed_problem = {"goal_state": [["open", "microwave_1"]]}
        obj_body_id = {"microwave_1": 3}

    with pytest.raises(ValueError, match="one In/On goal"):
        pick_place_goal(Problem())
    with pytest.raises(ValueError, match="behaviour must be one of"):
        ScriptedExpert("teleport")  # type: ignore[arg-type]
