"""A stand-in reward model names itself: the info carries the model id the service reports, and
the mock's rule ending an episode warns once, from Python as from the CLI."""

from __future__ import annotations

import warnings

import pytest

from evolve_envs import make_env
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.progress_reward import StandInModelWarning
from tests.helpers.synthetic_env import SyntheticProgressEnv


@pytest.fixture(scope="module")
def service():
    with EmbeddedService("mock", {"rule": "intensity"}) as svc:
        yield svc


def _play(url: str, script: list[int], episodes: int = 2) -> tuple[list[dict], list[bool]]:
    env = make_env(
        env_factory=SyntheticProgressEnv,
        scripts=[script],
        max_episode_steps=len(script),
        reward_model={
            "enable": True,
            "endpoint": url,
            "start_step": 1,
            "call_every": 1,
            "calls": "sync",
            "terminate_on_done": True,
            "done_threshold": 0.9,
        },
    )
    infos, ended_by_model = [], []
    try:
        for ep in range(episodes):
            _, info = env.reset(seed=ep)
            infos.append(info)
            while True:
                *_, terminated, truncated, info = env.step(env.action_space.sample())
                infos.append(info)
                if terminated or truncated:
                    ended_by_model.append(bool(terminated))
                    break
    finally:
        env.close()
    return infos, ended_by_model


def test_the_mock_ending_an_episode_warns_once_and_names_itself(service):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos, ended = _play(service.url, [0, 40, 95, 95, 95, 95])
    assert ended == [True, True]  # the rule's "done" ended both episodes
    stand_in = [w for w in caught if issubclass(w.category, StandInModelWarning)]
    assert len(stand_in) == 1, [str(w.message) for w in caught]  # once, not per episode
    text = str(stand_in[0].message)
    assert "stand-in reward model (mock-intensity" in text and "is_success" in text
    assert {info["reward_model_id"] for info in infos} == {"mock-intensity"}


def test_no_warning_when_the_model_does_not_end_the_episode(service):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, ended = _play(service.url, [0, 10, 20, 30], episodes=1)
    assert ended == [False]
    assert not [w for w in caught if issubclass(w.category, StandInModelWarning)]
