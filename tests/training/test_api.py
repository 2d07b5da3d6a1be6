"""The Python entry points: ``evolve_envs.train(...)`` runs a short ReachPlace training,
``evolve_envs.load_policy(...)`` brings the trained policy back, acting on raw observations."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import evolve_envs
from evolve_envs.training.policy_file import read_policy_file

SHORT = {
    "workers": {"num_workers": 1, "num_envs": 2, "num_cpus": 0.01},
    "env": {"max_episode_steps": 10},
    "distrl.min_buffer": 2,
    "distrl.batch_size": 2,
    "run": {"max_updates": 2, "log_every_s": 2, "tensorboard": False},
    "eval": {"every_updates": 2, "episodes": 2, "num_envs": 1, "sampled": False,
             "video_episodes": 0},
}  # fmt: skip


@pytest.mark.slow
def test_train_from_python_then_act_with_the_trained_policy(ray_local, tmp_path) -> None:
    log = io.StringIO()
    result = evolve_envs.train("distrl/reach_place", run_dir=tmp_path / "rp", log=log, **SHORT)
    assert isinstance(result, evolve_envs.TrainResult)
    assert result.run_dir == tmp_path / "rp" and result.algo == "distrl"
    assert result.counters["updates"] == 2
    assert result.checkpoint.is_file() and result.best is not None
    assert result.success is not None and 0.0 <= result.success <= 1.0
    assert (result.run_dir / "eval.csv").is_file() and "updates" in log.getvalue()

    policy = evolve_envs.load_policy(result.run_dir)
    assert isinstance(policy, evolve_envs.TrainedPolicy) and policy.path == result.best
    saved = read_policy_file(result.best).state_dict
    for key, value in policy.policy.state_dict().items():
        assert torch.equal(value, saved[key]), key
    last = evolve_envs.load_policy(result.run_dir, best=False)
    assert last.path == result.policy and last.counters["updates"] == 2

    env = policy.make_env()
    try:
        obs, info = env.reset(seed=0)
        action = policy.act(obs, info)
        assert action.shape == env.action_space.shape and action.dtype == np.float32
        assert np.array_equal(action, policy.act(obs, info))  # the mean action: deterministic
        obs, _, _, _, info = env.step(action)
        assert policy.act(obs, info, deterministic=False).shape == action.shape
    finally:
        env.close()


def test_a_bad_key_is_named_before_anything_starts(tmp_path) -> None:
    with pytest.raises(evolve_envs.ConfigError, match=r"learner\.lrr"):
        evolve_envs.train("distrl/reach_place", run_dir=tmp_path / "bad", **{"learner.lrr": 1})
    assert not (tmp_path / "bad").exists()


def test_no_config_and_no_run_to_resume_is_named() -> None:
    with pytest.raises(ValueError, match=r"train\(\) needs a config"):
        evolve_envs.train(minutes=1)


def test_a_run_without_held_out_evaluation_has_no_best_policy(tmp_path) -> None:
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="best.safetensors is written by a run with held"):
        evolve_envs.load_policy(tmp_path, best=True)


def test_the_top_level_names() -> None:
    import importlib

    from evolve_envs.training.api import train

    errors = importlib.import_module("evolve_envs.progress.config_error")
    loading = importlib.import_module("evolve_envs.stack.loading")
    assert evolve_envs.ConfigError is errors.ConfigError
    assert evolve_envs.load_config is loading.load_config
    assert evolve_envs.train is train and type(evolve_envs.training) is type(importlib)
    public = {"train", "load_config", "load_policy", "make_env", "make_vec", "open_reward_model"}
    assert set(evolve_envs.__all__) >= public | {"ConfigError"}
