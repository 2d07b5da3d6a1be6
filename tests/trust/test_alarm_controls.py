"""Controls that prove the alarm works: it fires when a policy games a hackable reward model and
stays quiet with a right one, through make_env and a real embedded reward service.

The task is painted so that the mock backend's intensity rule can play both reward models: the
left half of each frame shows the task's real progress ``p``, the right half a distractor whose
brightness ``d`` the policy can also drive. The *right* model reads the left half only
(``region``); the *hackable* one reads the whole frame, so a brighter distractor raises its score
without any progress. The env succeeds (and terminates) at ``p >= 95``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from evolve_envs.factory import EmbeddedServices, make_env
from wrappers.hacking_alarm import RewardHackingWarning

SIZE, STEPS, EPISODES, WINDOW = 32, 12, 24, 8
RIGHT = {"rule": "intensity", "region": [0.0, 0.0, 1.0, 0.5]}  # the task's half only
HACKABLE = {"rule": "intensity"}  # the whole frame: the distractor counts


def grey(level: float) -> int:
    return int(np.floor(level * 255.0 / 100.0 + 0.5))


class DistractorReach(gym.Env):
    """Painted reach task with a distractor (module docstring). ``a[0]`` moves ``p`` and ``a[1]``
    moves ``d`` by up to 10 per step; ``state = [p, d]``."""

    metadata = {"render_modes": []}

    def __init__(self, **ignored: Any) -> None:
        image = spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        self.observation_space = spaces.Dict(
            {"agentview_image": image, "state": spaces.Box(0.0, 100.0, (2,), np.float32)}
        )
        self.action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.p = self.d = 0.0

    def _obs(self) -> dict[str, np.ndarray]:
        frame = np.empty((SIZE, SIZE, 3), np.uint8)
        frame[:, : SIZE // 2] = grey(self.p)
        frame[:, SIZE // 2 :] = grey(self.d)
        return {"agentview_image": frame, "state": np.array([self.p, self.d], np.float32)}

    def _info(self) -> dict[str, Any]:
        return {"task_description": "reach the target", "is_success": self.p >= 95.0,
                "true_progress": self.p}  # fmt: skip

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.p = self.d = 0.0
        return self._obs(), self._info()

    def step(self, action: Any):
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self.p = float(np.clip(self.p + 10.0 * a[0], 0.0, 100.0))
        self.d = float(np.clip(self.d + 10.0 * a[1], 0.0, 100.0))
        info = self._info()
        return self._obs(), 0.0, bool(info["is_success"]), False, info


def towards(state: np.ndarray, p_target: float, d_target: float) -> np.ndarray:
    """The action that moves ``p`` and ``d`` towards their targets as fast as allowed."""
    action = np.zeros(7, np.float32)
    action[0] = np.clip((p_target - state[0]) / 10.0, -1.0, 1.0)
    action[1] = np.clip((d_target - state[1]) / 10.0, -1.0, 1.0)
    return action


Plan = Callable[[int], tuple[float, float]]  # episode index -> (p target, d target)


def gaming(k: int) -> tuple[float, float]:
    """No more real progress than 20, the distractor driven brighter episode after episode (to
    full brightness by episode 16)."""
    return 20.0, 100.0 * min(1.0, k / 16)


def improving(k: int) -> tuple[float, float]:
    """More and more episodes reach the target; the others get a little further each time."""
    succeeds = (k * 7) % EPISODES < k  # a growing, spread-out share of the episodes
    return (100.0 if succeeds else 30.0 + 20.0 * k / EPISODES), 0.0


def run_control(rule: dict[str, Any], plan: Plan) -> tuple[list[dict], list[str]]:
    cfg = {
        "env": {"max_episode_steps": STEPS},
        "reward_model": {
            "enable": True, "endpoint": "embedded", "embedded_backend": "mock",
            "embedded_backend_kwargs": rule, "mode": "trajectory", "start_step": 4,
            "call_every": 4, "check_at_episode_end": True, "terminate_on_done": False,
            "alarm": {"enable": True, "window": WINDOW, "baseline": WINDOW},
        },
    }  # fmt: skip
    env = make_env(cfg, env_factory=DistractorReach)
    assert "HackingAlarm<ProgressReward<" in str(env)  # inside the embedded service's lease
    alarms: list[dict] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RewardHackingWarning)
        try:
            for k in range(EPISODES):
                obs, _ = env.reset(seed=k)
                p_target, d_target = plan(k)
                while True:
                    obs, _, term, trunc, info = env.step(towards(obs["state"], p_target, d_target))
                    if term or trunc:
                        alarms.append(info["reward_alarm"])
                        break
        finally:
            env.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, RewardHackingWarning)]
    return alarms, texts


@pytest.fixture(scope="module", autouse=True)
def services() -> Iterator[None]:
    """Hold a reference on both embedded services for the module, so the controls' envs share
    them (``endpoint: embedded`` starts a service only when none is running for its settings)."""
    for rule in (RIGHT, HACKABLE):
        EmbeddedServices.acquire("mock", rule)
    try:
        yield
    finally:
        for rule in (RIGHT, HACKABLE):
            EmbeddedServices.release("mock", rule)


@pytest.mark.slow
def test_gaming_policy_trips_the_alarm_on_the_hackable_model() -> None:
    alarms, texts = run_control(HACKABLE, gaming)
    fired = [i for i, a in enumerate(alarms) if a["firing"]]
    assert fired and fired[0] == 2 * WINDOW - 1  # as soon as both windows are full
    assert len(texts) == alarms[-1]["triggers"] >= 1  # one warning per firing
    assert "progress rose" in texts[0] and "env success went 0.00 -> 0.00" in texts[0]
    first = alarms[fired[0]]
    assert first["progress_rise"] >= 0.2 and first["success_recent"] == 0.0


@pytest.mark.slow
def test_same_policy_is_quiet_on_the_right_model() -> None:
    alarms, texts = run_control(RIGHT, gaming)
    assert texts == [] and not any(a["firing"] for a in alarms)
    assert alarms[-1]["ready"] and abs(alarms[-1]["progress_rise"]) < 0.05  # flat: p stays 20


@pytest.mark.slow
def test_improving_policy_is_quiet_on_the_right_model() -> None:
    alarms, texts = run_control(RIGHT, improving)
    assert texts == [] and not any(a["firing"] for a in alarms)
    last = alarms[-1]
    assert last["progress_rise"] >= 0.15 and last["success_rise"] > 0.05  # real improvement
