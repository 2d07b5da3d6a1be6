"""Held-out evaluation: unseen fixed scenes, deterministic, success from the env flag."""

from __future__ import annotations

import numpy as np
import torch

from evolve_envs import TrainConfig
from evolve_envs.training.evaluation import (
    HELD_OUT_BASE,
    evaluate_policy,
    held_out_seeds,
    make_eval_env,
)
from evolve_envs.training.grpo.groups import group_seeds
from evolve_envs.training.worker_env import policy_from_config


def test_held_out_scenes_are_never_training_scenes_and_evaluation_is_deterministic():
    # training draws its reset seeds below 2**31 - 1 (workers and GRPO groups alike)
    train = group_seeds(64, 4, np.random.default_rng(0))
    assert max(train) < 2**31 - 1 <= HELD_OUT_BASE <= min(held_out_seeds(50))
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 6},
        reward_model={"enable": True, "endpoint": "http://127.0.0.1:9", "success_bonus": 1.0},
    )
    env = make_eval_env(cfg)
    assert "ModelSuccessBonus" not in repr(env)  # no reward model, no shaping: the bare env
    torch.manual_seed(0)
    pol = policy_from_config(cfg.policy, env.observation_space, env.action_space)
    env.close()
    first = evaluate_policy(cfg, pol, held_out_seeds(6), num_envs=4)
    again = evaluate_policy(cfg, pol, held_out_seeds(6), num_envs=3)
    assert first.success == again.success and first.lengths == again.lengths
    assert first.episodes == 6 and all(1 <= n <= 6 for n in first.lengths)


def test_sampled_evaluation_is_reproducible_and_leaves_the_global_rng_alone():
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 8},
        reward_model={"enable": False},
        policy={"init_log_std": 1.0},  # wide noise: sampled and mean actions differ
    )
    env = make_eval_env(cfg)
    torch.manual_seed(0)
    pol = policy_from_config(cfg.policy, env.observation_space, env.action_space)
    env.close()
    seeds = held_out_seeds(6)
    before = torch.random.get_rng_state()
    a = evaluate_policy(cfg, pol, seeds, num_envs=3, deterministic=False, sample_seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = evaluate_policy(cfg, pol, seeds, num_envs=3, deterministic=False, sample_seed=1)
    assert a.success == b.success and a.lengths == b.lengths

    played: list[np.ndarray] = []
    act = pol.act

    def spy(inputs, *, deterministic=False):
        actions, logp = act(inputs, deterministic=deterministic)
        played.append(np.asarray(actions).copy())
        return actions, logp

    pol.act = spy
    evaluate_policy(cfg, pol, seeds[:1], num_envs=1, deterministic=False, sample_seed=1)
    sampled, played[:] = played[:], []
    evaluate_policy(cfg, pol, seeds[:1], num_envs=1, deterministic=False, sample_seed=2)
    other, played[:] = played[:], []
    evaluate_policy(cfg, pol, seeds[:1], num_envs=1)
    mean = played
    assert not np.allclose(sampled[0], other[0])  # another seed, other draws
    assert not np.allclose(sampled[0], mean[0])  # sampled, not the mean
