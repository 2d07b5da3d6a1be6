"""RoboReward, Robo-Dopamine and TOPReward end to end: an episode through ``make_env``'s wrapper
stack, rewards from the real reward server whose backend asks a real OpenAI-compatible server
process (``fake_openai_server.py``, scripted by the task text)."""

from __future__ import annotations

from typing import Any

import pytest

from evolve_envs import make_env
from tests.helpers.synthetic_env import SyntheticProgressEnv
from tests.reward.service.backends.test_judge_runner import _service, chat_url  # noqa: F401 (fixture)

#: backend -> (task text scripting the chat server's answer, extra reward_model keys)
GOOD: dict[str, tuple[str, dict[str, Any]]] = {
    # ANSWER: 5 is "done" (and progress 100 on both frames of a pair: critic 0)
    "roboreward": ("stack the bowls [[ANSWER: 5]]", {"done_by": "backend"}),
    # a +25 % hop between the two frames of a pair: the pairwise critic
    "robodopamine": ("stack the bowls [[<score>+25%</score>]]", {}),
    # P("True") = e^-0.36 = 0.70 >= 0.5: "done"
    "topreward": ("stack the bowls [[logprobs True=-0.36,False=-1.2]]", {"done_by": "backend"}),
}


def _episode(url: str, task: str, **rm: Any) -> tuple[list[float], list[dict[str, Any]]]:
    env = make_env(
        env_factory=SyntheticProgressEnv, scripts=[[0, 30, 60, 90]], task=task,
        max_episode_steps=3,
        reward_model={"enable": True, "endpoint": url, "start_step": 1, "call_every": 1, **rm},
    )  # fmt: skip
    try:
        env.reset(seed=0)
        rewards, infos = [], []
        while True:
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            rewards.append(float(reward))
            infos.append(info)
            if terminated or truncated:
                return rewards, infos
    finally:
        env.close()


@pytest.mark.parametrize("backend", sorted(GOOD))
def test_an_episode_through_the_stack(chat_url: str, backend: str) -> None:  # noqa: F811
    task, rm = GOOD[backend]
    with _service(backend, chat_url) as svc:
        rewards, infos = _episode(svc.url, task, **rm)
    summary = infos[-1]["episode_reward_model"]
    assert summary["reward_model_errors"] == 0 and summary["progress_calls"] >= 1
    # dense rewards telescope to the final progress
    assert sum(rewards) == pytest.approx(summary["progress"] / 100.0, abs=1e-6)
    if backend == "robodopamine":  # each check: a +25 % hop from the milestone (frame 0)
        assert [info["progress"] for info in infos] == pytest.approx([25.0, 25.0, 25.0])
        assert not summary["done_by_progress"]
    else:  # the backend's /done ends the episode at the first check
        assert summary["done_by_progress"] and summary["done_step"] == 1 and len(infos) == 1


def test_malformed_answers_are_counted_not_scored(chat_url: str) -> None:  # noqa: F811
    with _service("roboreward", chat_url) as svc:
        _, infos = _episode(svc.url, "stack the bowls [[I think it is fine]]")
    summary = infos[-1]["episode_reward_model"]
    assert summary["reward_model_errors"] >= 1 and summary["reward_model_fallbacks"] >= 1
    assert summary["progress"] == 0.0  # held at the start, never a silent score
