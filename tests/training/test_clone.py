"""``evolve-envs clone`` on the real simulator, and ``policy.init_from``: the expert's episodes
become a policy file (safetensors, no pickle) that a run's policy starts from, and a file made
for other spaces or another policy block is refused with the key named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evolve_envs.cli.main import main as cli_main
from evolve_envs.progress.config_error import ConfigError
from evolve_envs.training.config import TrainConfig, load_train_config
from evolve_envs.training.evaluation import make_eval_env
from evolve_envs.training.policy_file import load_initial_weights, read_policy_file
from evolve_envs.training.worker_env import policy_from_config

CONFIG = "libero_object_finetune"


@pytest.fixture(scope="module")
def cloned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clone") / "clone.safetensors"
    argv = ["clone", "--config", CONFIG, "--out", str(out), "--init-states", "0",
            "--noisy-repeats", "1", "--steps", "60", "--seed", "3"]  # fmt: skip
    assert cli_main(argv) == 0
    return out


@pytest.mark.libero
def test_clone_writes_a_policy_file_fitted_to_the_expert(cloned: Path) -> None:
    saved = read_policy_file(cloned)
    info = saved.info["clone"]
    assert info["episodes_played"] == 2 and 1 <= info["episodes_kept"] <= 2
    assert info["samples"] > 100 and info["loss_last"] < info["loss_first"]
    assert saved.observation_space["state"].shape == (14,)  # robot 8 + soup 3 + basket 3
    # the state's mean and scale come from the expert's states, so they are not the defaults
    assert not torch.allclose(saved.state_dict["state_mean"], torch.zeros(14))
    assert torch.all(saved.state_dict["state_std"] >= 0.05)


@pytest.mark.libero
def test_a_run_starts_from_the_clone(cloned: Path) -> None:
    cfg = load_train_config(CONFIG)
    saved = read_policy_file(cloned)
    given = {"observation_space": saved.observation_space, "action_space": saved.action_space}
    policy = policy_from_config(cfg.policy, saved.observation_space, saved.action_space)
    load_initial_weights(policy, cloned, given)
    state = np.zeros((1, 14), np.float32)
    ours = policy.act({"state": state}, deterministic=True)[0]
    again = policy_from_config(cfg.policy, saved.observation_space, saved.action_space)
    again.load_state_dict(saved.state_dict)
    np.testing.assert_array_equal(ours, again.act({"state": state}, deterministic=True)[0])


@pytest.mark.libero
def test_a_clone_for_other_spaces_or_weights_is_refused(cloned: Path) -> None:
    cfg = load_train_config(CONFIG)
    saved = read_policy_file(cloned)
    other_obs = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (8,), np.float32)})
    given = {"observation_space": other_obs, "action_space": saved.action_space}
    policy = policy_from_config(cfg.policy, other_obs, saved.action_space)
    with pytest.raises(ConfigError, match=r"policy.init_from: .* observation space"):
        load_initial_weights(policy, cloned, given)
    wider = cfg.policy.model_copy(update={"hidden": 64})
    given = {"observation_space": saved.observation_space, "action_space": saved.action_space}
    policy = policy_from_config(wider, saved.observation_space, saved.action_space)
    with pytest.raises(ConfigError, match="other weights than this run's policy block"):
        load_initial_weights(policy, cloned, given)


def test_a_file_that_is_not_a_policy_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "clone.safetensors"
    bad.write_bytes(b"\x80\x04not safetensors")
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    policy = policy_from_config(TrainConfig().policy.model_copy(update={"image_key": None}),
                                box, box)  # fmt: skip
    with pytest.raises(ConfigError, match="policy.init_from: .*not a policy file"):
        load_initial_weights(policy, bad, {"observation_space": box, "action_space": box})


def test_the_held_out_envs_play_with_eval_env_overrides() -> None:
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 40},
        reward_model={"enable": False},
        eval={"env_overrides": {"max_episode_steps": 3}},
    )
    env = make_eval_env(cfg)
    try:
        env.reset(seed=0)
        ends = [env.step(env.action_space.sample())[3] for _ in range(3)]
    finally:
        env.close()
    assert ends == [False, False, True]


@pytest.mark.libero
def test_held_out_videos_draw_the_cameras_rendered_on_demand(cloned: Path) -> None:
    from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds

    cfg = load_train_config(CONFIG, overrides=["env.max_episode_steps=3"])
    saved = read_policy_file(cloned)
    with HeldOutEvaluator(cfg, num_envs=1) as evaluator:
        policy = evaluator.policy(saved.state_dict)
        result = evaluator.run(policy, held_out_seeds(1), record=1, video_key="agentview_image")
    frames = result.frames[0]
    assert len(frames) == 4  # the reset and three steps
    assert all(frame.shape == (64, 64, 3) and frame.max() > 0 for frame in frames)
