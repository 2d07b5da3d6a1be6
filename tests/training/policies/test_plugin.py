"""A transformer policy (tiny random ViT built from a config) plugs into the same interface."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Independent, Normal

from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.distrl.loss import aride_loss
from evolve_envs.training.grpo.loss import ppo_clip_loss
from evolve_envs.training.policies.base import Policy, downscale_images

transformers = pytest.importorskip("transformers")


class TinyViTPolicy(Policy):
    """Vision transformer over the frame + state, state-dependent Gaussian std, value head."""

    def __init__(self, action_dim: int, state_dim: int) -> None:
        super().__init__()
        cfg = transformers.ViTConfig(
            image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
            num_attention_heads=2, intermediate_size=64,
        )  # fmt: skip
        self.vit = transformers.ViTModel(cfg, add_pooling_layer=False)
        self.state = nn.Linear(state_dim, 32)
        self.head = nn.Linear(64, 2 * action_dim)
        self.value_head = nn.Linear(64, 1)

    def encode_obs(self, obs):
        return {
            "pixels": downscale_images(obs["image"], 32),
            "state": np.asarray(obs["state"], np.float32),
        }

    def forward(self, inputs):
        pixels = inputs["pixels"].to(torch.float32).permute(0, 3, 1, 2) / 127.5 - 1.0
        cls = self.vit(pixel_values=pixels).last_hidden_state[:, 0]
        feats = torch.cat([cls, torch.tanh(self.state(inputs["state"]))], dim=-1)
        mu, raw_std = self.head(feats).chunk(2, dim=-1)
        std = nn.functional.softplus(raw_std) + 1e-3
        return Independent(Normal(mu, std), 1), self.value_head(feats).squeeze(-1)


def test_transformer_policy_trains_through_the_same_losses():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    pol = TinyViTPolicy(action_dim=7, state_dim=8)
    t = 6
    obs = pol.encode_obs(
        {
            "image": rng.integers(0, 256, (t + 1, 128, 128, 3), dtype=np.uint8),
            "state": rng.normal(size=(t + 1, 8)),
        }
    )
    actions, logp = pol.act({k: v[:t] for k, v in obs.items()})
    assert actions.shape == (t, 7) and logp.shape == (t,)
    tr = Trajectory(obs, actions, logp, rng.normal(size=t).astype(np.float32), np.zeros(t, bool), 0)
    tr.validate()
    box = spaces.Box(-1.0, 1.0, (7,), np.float32)
    out = aride_loss(pol, [tr, tr], np.array([1.0, 0.5]), action_space=box, invalid_coef=0.1)
    out.loss.backward()
    vit_grads = [p.grad for p in pol.vit.parameters() if p.requires_grad]
    assert any(g is not None and torch.count_nonzero(g) > 0 for g in vit_grads)
    assert out.stats["mean_rho"] == pytest.approx(1.0, rel=1e-4)  # acted with these weights
    assert out.priorities.shape == (2,) and np.all(out.priorities > 0)

    pol.zero_grad()
    step_inputs = {k: v[:t] for k, v in obs.items()}
    ppo = ppo_clip_loss(pol, step_inputs, actions, logp, np.ones(t, np.float32))
    ppo.loss.backward()
    assert ppo.stats["mean_ratio"] == pytest.approx(1.0, rel=1e-4)

    other = TinyViTPolicy(action_dim=7, state_dim=8)
    other.load_state_dict(pol.state_dict())
    np.testing.assert_allclose(other.value(step_inputs), pol.value(step_inputs), rtol=1e-6)


class InstructionPolicy(Policy):
    """Conditions on the instruction: stores one number per step derived from its length."""

    def __init__(self, action_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.mu = nn.Linear(1, action_dim)
        self.value_head = nn.Linear(1, 1)
        self.scale = scale

    @classmethod
    def from_spaces(cls, observation_space, action_space, **kwargs):
        return cls(int(np.prod(action_space.shape)), **kwargs)

    def encode_obs(self, obs):
        texts = np.asarray(obs["task_description"]).reshape(-1)
        return {"text_len": np.array([[len(t) * self.scale] for t in texts], np.float32)}

    def forward(self, inputs):
        mu = self.mu(inputs["text_len"])
        value = self.value_head(inputs["text_len"]).squeeze(-1)
        return Independent(Normal(mu, torch.ones_like(mu)), 1), value


def test_a_policy_class_named_in_the_config_is_built_and_sees_the_instruction():
    """``policy.target`` builds another Policy subclass (how a VLA plugs in) with
    ``policy.kwargs``; workers hand it ``info["task_description"]`` in the observation."""
    from evolve_envs import TrainConfig
    from evolve_envs.envs.synthetic import TASK
    from evolve_envs.training.worker import RolloutWorker

    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 3},
        reward_model={"enable": False},
        policy={"target": f"{__name__}:InstructionPolicy", "kwargs": {"scale": 0.5}},
    )
    worker = RolloutWorker(cfg, worker_id=0)
    try:
        assert isinstance(worker.policy, InstructionPolicy) and worker.policy.scale == 0.5
        [traj] = worker.collect_episodes([1], None, version=0)
        assert traj.obs["text_len"].shape == (4, 1)
        assert (traj.obs["text_len"] == len(TASK) * 0.5).all()
    finally:
        worker.close()


@pytest.mark.parametrize(
    ("target", "message"),
    [("no_such_module_xyz:Thing", "cannot import"), ("numpy:ndarray", "not a subclass of Policy")],
)
def test_a_bad_policy_target_is_named(target, message):
    from gymnasium import spaces as sp

    from evolve_envs.training.config import PolicyConfig
    from evolve_envs.training.worker_env import policy_from_config

    with pytest.raises(ValueError, match=message):
        policy_from_config(PolicyConfig(target=target), sp.Box(-1, 1, (2,)), sp.Box(-1, 1, (2,)))
