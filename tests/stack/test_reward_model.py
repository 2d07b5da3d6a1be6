"""Opening a reward model: one context manager (``open_reward_model``), one embedded service per
vector env (``make_vec``, ``gym.make_vec``), everything closed in reverse order on any exit."""

from __future__ import annotations

import gymnasium as gym
import psutil
import pytest

import evolve_envs
from evolve_envs import make_vec, open_reward_model
from evolve_envs.reward.clients.service_check import ServiceUnavailableError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.synthetic_env import SyntheticProgressEnv, paint

RM = {"enable": True, "endpoint": "embedded", "start_step": 1, "call_every": 1,
      "embedded_backend_kwargs": {"rule": "intensity"}}  # fmt: skip


def _services() -> int:
    """Reward services this process has started (children running the server module)."""
    count = 0
    for child in psutil.Process().children(recursive=True):
        try:
            count += "evolve_envs.reward.service" in " ".join(child.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):  # an exited child not yet reaped
            continue
    return count


def test_make_vec_starts_one_service_for_all_sub_envs() -> None:
    before = _services()
    vec = make_vec(
        num_envs=3, reward_model=RM, env_factory=SyntheticProgressEnv, scripts=[[0, 40]],
        max_episode_steps=2,
    )  # fmt: skip
    try:
        assert _services() == before + 1
        vec.reset(seed=0)
        _, rewards, *_ = vec.step(vec.action_space.sample())
        assert rewards.tolist() == pytest.approx([0.4, 0.4, 0.4])  # all answered by that one
        urls = {e.get_wrapper_attr("client").pool.urls[0] for e in vec.unwrapped.envs}
        assert urls == {vec.service.url}
    finally:
        vec.close()
    assert _services() == before and not vec.service.is_running()


def test_gym_make_vec_shares_one_service_too() -> None:
    before = _services()
    vec = gym.make_vec("evolve_envs/ReachPlace-v0", num_envs=2, config="reach_place")
    try:
        assert _services() == before + 1
        assert vec.num_envs == 2 and vec.spec.id == "evolve_envs/ReachPlace-v0"
        vec.reset(seed=0)
        vec.step(vec.action_space.sample())
    finally:
        vec.close()
    assert _services() == before


def test_make_env_per_sub_env_would_start_one_each() -> None:
    """The control: without make_vec each stack starts (and stops) its own service."""
    before = _services()
    envs = [
        evolve_envs.make_env(reward_model=RM, env_factory=SyntheticProgressEnv, scripts=[[0, 40]])
        for _ in range(2)
    ]
    assert _services() == before + 2
    for env in envs:
        env.close()
    assert _services() == before


def test_open_reward_model_closes_client_pool_and_service_in_reverse_order() -> None:
    with open_reward_model(RM) as model:
        assert model.service.is_running()
        assert model.client.pairwise_critic("t", paint(0), paint(40)).ok
    assert model.pool.closed and not model.service.is_running()


def test_a_refused_start_up_closes_what_was_opened() -> None:
    with EmbeddedService("mock", {"rule": "intensity"}, token="right") as svc:
        before = _services()
        rm = {**RM, "endpoint": svc.url, "token": "wrong"}
        with pytest.raises(ServiceUnavailableError, match="401|403|token"):
            open_reward_model(rm)
        assert _services() == before  # nothing left running, the given service untouched
        assert svc.is_running()


def test_a_given_service_and_pool_are_left_open() -> None:
    with EmbeddedService("mock", {"rule": "intensity"}) as svc:
        with open_reward_model(RM, embedded_service=svc) as model:
            assert model.service is None and model.pool.urls == [svc.url]
            pool = model.pool
        assert pool.closed and svc.is_running()
        with open_reward_model(RM, embedded_service=svc) as first:
            with open_reward_model(RM, pool=first.pool) as second:
                assert second.pool is first.pool
            assert not first.pool.closed
