"""Held-out evaluation: unseen fixed scenes, deterministic, success from the env flag."""

from __future__ import annotations

import numpy as np
import torch

from evolve_envs.distrl.config import TrainConfig
from evolve_envs.distrl.evaluation import (
    HELD_OUT_BASE,
    evaluate_policy,
    held_out_seeds,
    make_eval_env,
)
from evolve_envs.distrl.worker import policy_from_config
from evolve_envs.rl.grpo import group_seeds


def test_held_out_scenes_are_never_training_scenes_and_evaluation_is_deterministic():
    # training draws its reset seeds below 2**31 - 1 (workers and GRPO groups alike)
    train = group_seeds(64, 4, np.random.default_rng(0))
    assert max(train) < 2**31 - 1 <= HELD_OUT_BASE <= min(held_out_seeds(50))
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 6},
        reward_model={"enable": True, "endpoint": "http://127.0.0.1:9"},  # never contacted
        shaping={"success_bonus": 1.0},
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
