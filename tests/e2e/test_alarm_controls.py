"""Controls that prove the alarm works, on the synthetic ReachPlace task through make_env and the
real embedded reward service (mock backend reading the rendered scene).

* A policy that games the reward model — it drags the yellow distractor further towards the
  green zone episode after episode and never touches the red block — trips the alarm under the
  hackable rule (``reach_place_hackable`` reads the distractor), and stays quiet under the right
  rule (``reach_place`` reads the block).
* A policy that really improves (more and more episodes finish the task, the others get a little
  further) stays quiet under the right rule.

The audit of model termination tells the same story: the hackable model ends episodes that never
succeeded, the right one ends successes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from evolve_envs import make_env
from evolve_envs.envs.synthetic import ReachPlaceEnv, clean_gaming_seeds, scripted_action
from evolve_envs.progress.hacking import RewardHackingWarning
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

STEPS, EPISODES, WINDOW = 40, 24, 8
RIGHT = {"rule": "reach_place"}
HACKABLE = {"rule": "reach_place_hackable"}

Policy = Callable[[ReachPlaceEnv, int, int, dict[str, Any], float], np.ndarray]


def gaming(env: ReachPlaceEnv, k: int, t: int, info: dict[str, Any], d0: float) -> np.ndarray:
    """Drag the distractor a growing share of the way to the target (all of it from episode
    16 on), then stand still."""
    share = min(1.0, k / 16)
    if info["distractor_to_target"] > (1.0 - share) * d0 + 0.02:
        return scripted_action(env, "distractor")
    return np.zeros(2, np.float32)


def improving(env: ReachPlaceEnv, k: int, t: int, info: dict[str, Any], d0: float) -> np.ndarray:
    """A growing, spread-out share of the episodes run the expert to the end; the others run it
    for a few steps (a few more each episode), then stand still."""
    finishes = (k * 7) % EPISODES < k
    budget = STEPS if finishes else round(2 + 6 * k / EPISODES)
    return scripted_action(env, "task") if t < budget else np.zeros(2, np.float32)


@functools.cache
def gaming_layouts() -> list[int]:
    """Seeds whose layout lets the distractor be dragged to the target without the gripper
    passing by the block (an accidental grasp would be real progress, not gaming)."""
    return clean_gaming_seeds(EPISODES, STEPS, search=10 * EPISODES)


#: One embedded service per rule for the whole module, passed to every control's env.
_SERVICES: dict[str, EmbeddedService] = {}


@pytest.fixture(scope="module", autouse=True)
def services() -> Iterator[None]:
    """Start both embedded services once for the module; the controls' envs share them
    (``make_env(..., embedded_service=...)``) instead of each starting its own."""
    try:
        for rule in (RIGHT, HACKABLE):
            _SERVICES[repr(rule)] = EmbeddedService("mock", dict(rule)).start()
        yield
    finally:
        for svc in _SERVICES.values():
            svc.stop()
        _SERVICES.clear()


def run_control(rule: dict[str, Any], policy: Policy) -> tuple[list[dict], list[str], list[dict]]:
    """Roll out the policy's schedule; the alarm state and the episode summary of each episode,
    and the texts of the alarm's warnings."""
    overrides = {
        "env": {"max_episode_steps": STEPS},
        "reward_model": {
            "embedded_backend_kwargs": rule, "start_step": 10, "call_every": 10,
            "check_at_episode_end": True,
            "alarm": {"enable": True, "window": WINDOW, "baseline": WINDOW},
        },
    }  # fmt: skip
    env = make_env(["reach_place", overrides], embedded_service=_SERVICES.get(repr(rule)))
    assert env.get_wrapper_attr("reward_step").alarm is not None  # the reward step feeds it
    alarms: list[dict] = []
    summaries: list[dict] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RewardHackingWarning)
        try:
            for k in range(EPISODES):
                _, info = env.reset(seed=gaming_layouts()[k])
                d0 = info["distractor_to_target"]
                for t in range(STEPS):
                    _, _, term, trunc, info = env.step(policy(env.unwrapped, k, t, info, d0))
                    if term or trunc:
                        alarms.append(info["reward_alarm"])
                        summaries.append(info["episode_reward_model"])
                        break
        finally:
            env.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, RewardHackingWarning)]
    return alarms, texts, summaries


@pytest.mark.slow
def test_gaming_policy_trips_the_alarm_on_the_hackable_model() -> None:
    alarms, texts, summaries = run_control(HACKABLE, gaming)
    assert not any(s["is_success"] for s in summaries)  # no real progress was made
    fired = [i for i, a in enumerate(alarms) if a["firing"]]
    assert fired and fired[0] == 2 * WINDOW - 1  # as soon as both windows are full
    assert len(texts) == alarms[-1]["triggers"] >= 1  # one warning per firing
    assert "progress rose" in texts[0] and "env success went 0.00 -> 0.00" in texts[0]
    first = alarms[fired[0]]
    assert first["progress_rise"] >= 0.3 and first["success_recent"] == 0.0
    # the hackable model also ends episodes that never succeeded
    audit = summaries[-1]["termination_audit"]
    assert audit["model_done"] >= 3 and audit["precision"] == 0.0


@pytest.mark.slow
def test_same_policy_is_quiet_on_the_right_model() -> None:
    alarms, texts, summaries = run_control(RIGHT, gaming)
    assert texts == [] and not any(a["firing"] for a in alarms)
    assert alarms[-1]["ready"] and abs(alarms[-1]["progress_rise"]) < 0.1
    assert summaries[-1]["termination_audit"]["model_done"] == 0


@pytest.mark.slow
def test_improving_policy_is_quiet_on_the_right_model() -> None:
    alarms, texts, summaries = run_control(RIGHT, improving)
    assert texts == [] and not any(a["firing"] for a in alarms)
    last = alarms[-1]
    assert last["progress_rise"] >= 0.15 and last["success_rise"] > 0.05  # real improvement
    audit = summaries[-1]["termination_audit"]
    assert audit["env_success"] >= WINDOW and audit["precision"] >= 0.9
