"""The ``info`` keys are declared once (``evolve_envs.wrappers.info_keys``): the docs tables are
generated from that declaration, and the wrappers emit exactly the declared keys; the episode
summary holds only ``EpisodeSummary`` keys, with progress in percent for every kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from evolve_envs import make_env
from evolve_envs.progress.episode_summary import SUMMARY_KEYS
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.info_keys import INFO_KEYS, keys_of, markdown_table
from tests.helpers.synthetic_env import SyntheticProgressEnv

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [0, 20, 40, 60, 80]


@pytest.mark.parametrize("producer", sorted(INFO_KEYS))
def test_the_docs_table_is_the_declaration(producer: str) -> None:
    assert markdown_table(producer) in (ROOT / "docs" / "wrappers.md").read_text()


def _episode(env: gym.Env) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    _, reset_info = env.reset(seed=0)
    infos = []
    while True:
        *_, terminated, truncated, info = env.step(env.action_space.sample())
        infos.append(info)
        if terminated or truncated:
            env.close()
            return reset_info, infos


def _stack(url: str, kind: str, **rm: Any) -> gym.Env:
    if kind == "progress":  # a check on every step
        rm = {"start_step": 1, "call_every": 1, **rm}
    return make_env(
        env_factory=SyntheticProgressEnv, scripts=[SCRIPT], max_episode_steps=4,
        reward_model={"enable": True, "endpoint": url, "kind": kind, **rm},
    )  # fmt: skip


@pytest.fixture(scope="module")
def service() -> Any:
    with EmbeddedService("mock", {"rule": "intensity"}) as svc:
        yield svc


BASE = {"is_success", "task_description", "episode_index", "painted_progress"}  # the test env's own


@pytest.mark.parametrize(
    ("kind", "producer"),
    [("progress", "ProgressReward"), ("video_score", "EpisodeScoreReward"),
     ("pickle_scorer", "EpisodeScoreReward")],
)  # fmt: skip
def test_each_reward_wrapper_emits_exactly_its_declared_keys(service, kind, producer) -> None:
    reset_info, infos = _episode(_stack(service.url, kind, alarm={"enable": True}))
    declared = keys_of(producer) | keys_of("HackingAlarm")
    seen = set(reset_info) | {k for info in infos for k in info}
    assert seen - BASE == declared - {"env_terminated"}  # that one only with ignore_terminations
    when_reset = {n for k in INFO_KEYS[producer] if "reset" in k.when for n in k.names}
    assert set(reset_info) - BASE == when_reset
    summary = infos[-1]["episode_reward_model"]
    assert set(summary) <= SUMMARY_KEYS
    assert 0.0 <= summary["progress"] <= 100.0 and summary["progress"] > 1.0  # percent
    assert summary["max_progress"] >= summary["progress"]


def test_ignore_terminations_adds_env_terminated(service) -> None:
    _, infos = _episode(_stack(service.url, "pickle_scorer", ignore_terminations=True))
    assert "env_terminated" in infos[-1]


def test_the_progressive_horizon_emits_its_declared_keys() -> None:
    env = make_env(env_factory=SyntheticProgressEnv, scripts=[SCRIPT], max_episode_steps=4,
                   reward_model={"progressive_max_step": True})  # fmt: skip
    reset_info, infos = _episode(env)
    seen = set(reset_info) | {k for info in infos for k in info}
    assert seen - BASE == keys_of("ProgressiveHorizon")
