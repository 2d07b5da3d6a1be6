"""The knobs of D3's race: per-worker step delays, and GRPO's entropy floor, invalid-action
penalty and round size (the control knobs DistRL's learner has), without Ray."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evolve_envs import ConfigError, TrainConfig, load_train_config
from evolve_envs.training.algorithm import TrainContext
from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.grpo.algorithm import GRPO, round_groups
from evolve_envs.training.policies.base import CNNGaussianPolicy
from evolve_envs.training.worker import RolloutWorker

BOX = spaces.Box(-1.0, 1.0, (1,), np.float32)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["workers.num_workers=3", "workers.step_delay_s=[0, 0.02]"],
         "workers.step_delay_s: 2 entries for 3 workers: give one per worker (or [] for none)"),
        (["workers.num_workers=2", "workers.step_delay_s=[0, -0.1]"],
         "workers.step_delay_s: delays must be finite seconds >= 0, not -0.1"),
        (["workers.step_delay_s=0.02"], "workers.step_delay_s: expected a list, got 0.02"),
    ],
)  # fmt: skip
def test_step_delays_need_one_non_negative_entry_per_worker(overrides, message) -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config({}, overrides=overrides)
    assert str(err.value).splitlines()[0].startswith(message)
    ok = load_train_config({}, overrides=["workers.num_workers=3",
                                          "workers.step_delay_s=[0, 0, 0.06]"])  # fmt: skip
    assert ok.workers.step_delay_s == [0.0, 0.0, 0.06]


def test_a_worker_sleeps_its_own_delay_after_every_env_step() -> None:
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 6},
        reward_model={"enable": False},
        workers={"num_workers": 2, "step_delay_s": [0.0, 0.05]},
    )
    took = []
    for worker_id in (0, 1):
        worker = RolloutWorker(cfg, worker_id=worker_id)
        worker.collect_episodes([3], None, version=0)  # warm-up: first inference
        t0 = time.perf_counter()
        [traj] = worker.collect_episodes([7], None, version=0)
        took.append(time.perf_counter() - t0)
        worker.close()
        assert len(traj) == 6
    assert took[1] >= 6 * 0.05  # worker 1: 6 steps, 50 ms each
    assert took[0] < took[1] - 0.15  # worker 0 has no delay


def _ctx(grpo: dict) -> TrainContext:
    cfg = TrainConfig(algo="grpo", grpo={"group_size": 2, "epochs": 1, "minibatch_steps": 64,
                                         **grpo})  # fmt: skip
    policy = CNNGaussianPolicy(action_dim=1, state_dim=2, image_key=None, init_log_std=-2.0)
    return TrainContext(cfg, [], None, None, policy, {"action_space": BOX})


def _episodes(n: int = 4, length: int = 5, action: float = 3.0) -> list[Trajectory]:
    rng = np.random.default_rng(0)
    return [
        Trajectory(
            obs={"state": rng.normal(size=(length + 1, 2)).astype(np.float32)},
            actions=np.full((length, 1), action, np.float32),  # far outside the box
            behaviour_logp=np.full(length, -3.0, np.float32),
            rewards=np.full(length, float(i), np.float32),
            dones=np.eye(1, length, length - 1, dtype=bool)[0],
            policy_version=0,
        )
        for i in range(n)
    ]


def test_grpo_entropy_floor_raises_the_coefficient_below_the_target() -> None:
    floors = {}
    for target in (None, 5.0):
        algo = GRPO()
        algo.setup(_ctx({"entropy_coef": 1e-3, "entropy_target": target}))
        for _ in range(3):
            algo.update(_episodes(), 0.0)
        floors[target] = algo.entropy_coef
        assert algo.metrics()["entropy_coef_now"] >= 1e-3
    assert floors[None] == 1e-3  # no target: the configured coefficient
    assert floors[5.0] > 1e-3  # entropy far below 5 nats: it grew each step
    algo2 = GRPO()
    algo2.setup(_ctx({"entropy_coef": 1e-3, "entropy_target": 5.0}))
    algo2.load_state_dict(algo.state_dict())  # the coefficient is checkpointed
    assert algo2.entropy_coef == floors[5.0]


def test_grpo_invalid_penalty_pulls_the_mean_into_the_box() -> None:
    """Out-of-box actions: with ``invalid_coef`` the mean of a policy sitting outside the box
    moves back towards it; without it, it does not move that way."""
    means = {}
    for coef in (0.0, 1.0):
        torch.manual_seed(0)
        algo = GRPO()
        algo.setup(_ctx({"invalid_coef": coef, "lr": 1e-2, "epochs": 4}))
        with torch.no_grad():
            algo.policy.actor[-1].bias.fill_(1.3)  # mean outside [-1, 1]
        # equal rewards: zero advantages, so only the entropy and invalid terms push
        eps = _episodes(action=1.3)
        for t in eps:
            t.rewards[:] = 0.0
        for _ in range(5):
            algo.update(eps, 0.0)
        assert algo.last_stats["invalid_rate"] == 1.0  # reported now that GRPO has a validator
        means[coef] = float(algo.policy.actor[-1].bias[0].detach())
    assert means[1.0] < 1.3 - 0.05 and abs(means[0.0] - 1.3) < 0.01


def test_grpo_round_size_scales_with_the_workers() -> None:
    cfg = load_train_config("reach_place", {"algo": "grpo"})  # 2 workers x 4 envs, groups of 4
    assert round_groups(cfg) == 2
    slow = load_train_config("reach_place", overrides=["algo=grpo", "workers.num_workers=3",
                                                       "grpo.episodes_per_env=2"])  # fmt: skip
    assert round_groups(slow) == 6  # 24 episodes
    fixed = load_train_config("reach_place", overrides=["algo=grpo", "grpo.groups_per_round=5"])
    assert round_groups(fixed) == 5
