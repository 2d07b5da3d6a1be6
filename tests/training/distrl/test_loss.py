"""A-RIDE and PPO-clip losses: the formula, gradient signs, priorities, the invalid penalty."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.common.validators import gaussian_mass_outside, out_of_bounds_or_nonfinite
from evolve_envs.training.distrl.loss import aride_loss, trajectory_priorities
from evolve_envs.training.distrl.replay import PRIORITY_EPS
from evolve_envs.training.distrl.retrace import retrace_targets
from evolve_envs.training.grpo.loss import ppo_clip_loss
from evolve_envs.training.policies.base import CNNGaussianPolicy

BOX = spaces.Box(-1.0, 1.0, (1,), np.float32)


def toy_policy(seed: int = 0, hidden: int = 16) -> CNNGaussianPolicy:
    torch.manual_seed(seed)
    return CNNGaussianPolicy(1, 2, image_key=None, hidden=hidden)


def rollout(pol, t: int, rng, *, rewards=None, dones=None, logp_noise: float = 0.0) -> Trajectory:
    obs = pol.encode_obs({"state": rng.normal(size=(t + 1, 2)).astype(np.float32)})
    actions, logp = pol.act({k: v[:t] for k, v in obs.items()})
    return Trajectory(
        obs=obs,
        actions=actions,
        behaviour_logp=(logp + logp_noise * rng.normal(size=t)).astype(np.float32),
        rewards=np.asarray(rewards if rewards is not None else rng.normal(size=t), np.float32),
        dones=np.asarray(dones if dones is not None else np.zeros(t, bool)),
        policy_version=0,
    )


def log_probs(pol, tr: Trajectory) -> torch.Tensor:
    dist, _ = pol(pol.to_inputs(tr.step_obs()))
    return dist.log_prob(torch.as_tensor(tr.actions))


def test_aride_matches_the_written_formula():
    pol = toy_policy(3)
    rng = np.random.default_rng(3)
    trajs = [
        rollout(pol, 5, rng, dones=[False, False, True, False, False], logp_noise=0.5),
        rollout(pol, 4, rng, logp_noise=0.5),  # truncated: bootstrapped from obs[T]
    ]
    w_is = np.array([0.5, 1.0])
    gamma, lam, rho_bar = 0.9, 0.7, 1.0
    out = aride_loss(
        pol, trajs, w_is, gamma=gamma, lam=lam, rho_bar=rho_bar, entropy_coef=0.01,
        value_coef=0.5,
    )  # fmt: skip

    pg_terms, v_terms, ent = [], [], []
    with torch.no_grad():
        for tr, w in zip(trajs, w_is, strict=True):
            dist, values = pol(pol.to_inputs(tr.obs))
            v = values.numpy().astype(np.float64)
            t = len(tr)
            lp = log_probs(pol, tr).numpy().astype(np.float64)
            rho = np.exp(lp - tr.behaviour_logp)
            ret = retrace_targets(tr.rewards, v[:t], v[t], rho, tr.dones, gamma, lam)
            for k in range(t):
                if tr.dones[k]:
                    next_ret = 0.0
                elif k == t - 1:
                    next_ret = v[t]
                else:
                    next_ret = ret[k + 1]
                adv = tr.rewards[k] + gamma * next_ret - v[k]
                pg_terms.append(-w * min(rho[k], rho_bar) * adv * lp[k])
                v_terms.append(0.5 * w * (v[k] - ret[k]) ** 2)
            ent.extend(dist.entropy().numpy()[:t])
    policy_loss = np.mean(pg_terms)
    value_loss = np.mean(v_terms)
    assert out.stats["policy_loss"] == pytest.approx(policy_loss, rel=1e-4, abs=1e-6)
    assert out.stats["value_loss"] == pytest.approx(value_loss, rel=1e-4, abs=1e-6)
    assert out.stats["entropy"] == pytest.approx(np.mean(ent), rel=1e-5)
    expected = policy_loss - 0.01 * np.mean(ent) + 0.5 * value_loss
    assert out.loss.item() == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert out.stats["steps"] == 9.0
    assert np.isnan(out.stats["invalid_rate"])  # no action space given
    as_tensor = aride_loss(
        pol, trajs, torch.tensor(w_is), gamma=gamma, lam=lam, rho_bar=rho_bar, entropy_coef=0.01,
        value_coef=0.5,
    )  # fmt: skip
    assert as_tensor.loss.item() == pytest.approx(out.loss.item(), rel=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_sign_moves_log_prob(sign):
    pol = toy_policy(0)
    rng = np.random.default_rng(0)
    tr = rollout(pol, 8, rng, rewards=np.full(8, 10.0 * sign))
    before = log_probs(pol, tr).sum().item()
    opt = torch.optim.SGD(pol.parameters(), lr=1e-3)
    out = aride_loss(pol, [tr], gamma=0.9, lam=0.9, value_coef=0.0)
    assert np.sign(out.stats["mean_advantage"]) == sign
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    after = log_probs(pol, tr).sum().item()
    assert (after - before) * sign > 0


def test_value_loss_moves_values_toward_retrace_targets():
    pol = toy_policy(1)
    rng = np.random.default_rng(1)
    tr = rollout(pol, 6, rng, rewards=np.full(6, 3.0))
    opt = torch.optim.SGD(pol.parameters(), lr=1e-2)
    first = aride_loss(pol, [tr], gamma=0.5, lam=1.0, value_coef=1.0).stats["value_loss"]
    for _ in range(5):
        out = aride_loss(pol, [tr], gamma=0.5, lam=1.0, value_coef=1.0)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert out.stats["value_loss"] < first


def _shift_mean(pol: CNNGaussianPolicy, mean: float) -> None:
    with torch.no_grad():
        last = pol.actor[-1]
        last.weight.zero_()
        last.bias.fill_(mean)


@pytest.mark.parametrize("analytic", [True, False])
def test_invalid_penalty_pushes_the_mean_back_into_the_box(analytic):
    pol = toy_policy(2)
    _shift_mean(pol, 2.0)  # every action's mean lies outside [-1, 1]
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    tr = rollout(pol, 400, rng, rewards=np.zeros(400))
    # the same check under another name takes the score-function path
    validator = (
        out_of_bounds_or_nonfinite if analytic else (lambda a, s: out_of_bounds_or_nonfinite(a, s))
    )
    kw = dict(gamma=0.9, lam=0.9, value_coef=0.0, action_space=BOX, validator=validator)
    with_penalty = aride_loss(pol, [tr], invalid_coef=1.0, **kw)
    without = aride_loss(pol, [tr], invalid_coef=0.0, **kw)
    assert with_penalty.stats["invalid_rate"] > 0.9
    assert without.stats["invalid_rate"] == with_penalty.stats["invalid_rate"]
    penalty = with_penalty.loss - without.loss
    (grad,) = torch.autograd.grad(penalty, [pol.actor[-1].bias])
    assert grad.item() > 0  # gradient descent lowers the mean toward the box
    if analytic:
        assert with_penalty.stats["p_invalid"] == pytest.approx(penalty.item(), rel=1e-5)
        opt = torch.optim.SGD(pol.parameters(), lr=0.1)
        for _ in range(10):
            out = aride_loss(pol, [tr], invalid_coef=5.0, **kw)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
        assert out.stats["p_invalid"] < with_penalty.stats["p_invalid"]
        assert pol.actor[-1].bias.item() < 2.0


def test_priorities_follow_td_error_ratio_and_entropy():
    pol = toy_policy(4)
    rng = np.random.default_rng(4)
    quiet = rollout(pol, 6, rng, rewards=np.zeros(6))
    loud = rollout(pol, 6, rng, rewards=np.full(6, 5.0))
    out = aride_loss(pol, [quiet, loud], gamma=0.9, lam=0.9, priority_weights=(1.0, 0.0, 0.0))
    assert out.priorities.shape == (2,)
    assert out.priorities[1] > out.priorities[0]
    # w1 = 1 alone gives mean |one-step TD error| under the current values
    with torch.no_grad():
        _, v = pol(pol.to_inputs(loud.obs))
    v = v.numpy().astype(np.float64)
    td = loud.rewards + 0.9 * v[1:] - v[:-1]
    assert out.priorities[1] == pytest.approx(np.abs(td).mean(), rel=1e-5)
    # the refresh helper agrees with the loss, chunked or not
    for chunk in (1, 32):
        refreshed = trajectory_priorities(
            pol, [quiet, loud], gamma=0.9, lam=0.5, rho_bar=1.0, priority_weights=(1.0, 0.0, 0.0),
            chunk=chunk,
        )  # fmt: skip
        np.testing.assert_allclose(refreshed, out.priorities, rtol=1e-6)
    # ratio term: on-policy data has mean rho = 1
    only_rho = trajectory_priorities(pol, [quiet], priority_weights=(0.0, 1.0, 0.0))
    assert only_rho[0] == pytest.approx(1.0, rel=1e-5)
    # entropy term: mean of -log pi of the taken actions
    only_h = trajectory_priorities(pol, [quiet], priority_weights=(0.0, 0.0, 1.0))
    assert only_h[0] == pytest.approx(max(-log_probs(pol, quiet).mean().item(), PRIORITY_EPS))
    # a negative combination is floored, never handed to the buffer as negative
    floored = trajectory_priorities(pol, [quiet], priority_weights=(0.0, -1.0, 0.0))
    assert floored[0] == PRIORITY_EPS


def test_aride_rejects_bad_arguments():
    pol = toy_policy()
    tr = rollout(pol, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="is_weights"):
        aride_loss(pol, [tr], np.ones(2))
    with pytest.raises(ValueError, match="action_space"):
        aride_loss(pol, [tr], invalid_coef=1.0)
    with pytest.raises(ValueError, match="no trajectories"):
        aride_loss(pol, [])


def test_ppo_clip_loss_sign_clipping_and_mask():
    pol = toy_policy(5)
    rng = np.random.default_rng(5)
    inputs = pol.encode_obs({"state": rng.normal(size=(6, 2)).astype(np.float32)})
    actions, old = pol.act(inputs)
    adv = np.array([2.0, -1.0, 0.5, 0.0, 1.0, -2.0], np.float32)
    out = ppo_clip_loss(pol, inputs, actions, old, adv, action_space=BOX)
    assert out.stats["policy_loss"] == pytest.approx(-adv.mean(), rel=1e-5)
    assert out.stats["clip_frac"] == 0.0 and out.stats["approx_kl"] == pytest.approx(0, abs=1e-6)
    assert out.priorities.size == 0

    # one step raises the log-prob of the action with the largest positive advantage
    only_first = np.zeros(6, np.float32)
    only_first[0] = 1.0
    opt = torch.optim.SGD(pol.parameters(), lr=1e-3)
    lp0 = pol(pol.to_inputs(inputs))[0].log_prob(torch.as_tensor(actions))[0].item()
    loss = ppo_clip_loss(pol, inputs, actions, old, only_first).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    lp1 = pol(pol.to_inputs(inputs))[0].log_prob(torch.as_tensor(actions))[0].item()
    assert lp1 > lp0

    # ratio far above 1 + clip with a positive advantage: clipped, no gradient
    _, old = pol.act(inputs)  # not used for log-probs; recompute them exactly below
    with torch.no_grad():
        cur = pol(pol.to_inputs(inputs))[0].log_prob(torch.as_tensor(actions)).numpy()
    clipped = ppo_clip_loss(pol, inputs, actions, cur - 1.0, np.ones(6, np.float32))
    assert clipped.stats["clip_frac"] == 1.0
    grads = torch.autograd.grad(clipped.loss, list(pol.parameters()), allow_unused=True)
    assert all(g is None or torch.count_nonzero(g) == 0 for g in grads)

    # the mask drops steps from the mean
    mask = np.array([True, False, False, False, False, False])
    masked = ppo_clip_loss(pol, inputs, actions, cur, adv, mask=mask)
    assert masked.stats["policy_loss"] == pytest.approx(-adv[0], rel=1e-5)
    with pytest.raises(ValueError, match="must all be"):
        ppo_clip_loss(pol, inputs, actions, cur[:3], adv)


def test_validators_check_action_chunks_against_the_per_step_box():
    box = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32))
    chunk = torch.tensor([[0.0, 1.0, 0.5, 1.5], [0.0, 1.0, 0.5, 2.5], [0.0, -0.1, 0.5, 1.5]])
    assert out_of_bounds_or_nonfinite(chunk, box).tolist() == [0.0, 1.0, 1.0]
    mu = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 5.0, 1.0]])
    dist = torch.distributions.Independent(torch.distributions.Normal(mu, 1e-3), 1)
    p = gaussian_mass_outside(dist, box)
    assert p[0].item() == pytest.approx(0.0, abs=1e-6) and p[1].item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="not a multiple"):
        out_of_bounds_or_nonfinite(torch.zeros(2, 3), box)
