"""Off-policy control: staleness at sampling time, the trust region, value and priority scales,
the entropy floor."""

from __future__ import annotations

import numpy as np
import torch

from evolve_envs.training.distrl.config import DistRLConfig
from evolve_envs.training.distrl.learner import Learner
from evolve_envs.training.distrl.loss import aride_loss, trajectory_priorities
from evolve_envs.training.distrl.replay import PrioritizedReplay
from tests.training.distrl.test_loss import BOX, rollout, toy_policy


def test_retired_items_are_never_sampled_and_weights_stay_in_range():
    buf = PrioritizedReplay(capacity=6, alpha=1.0, beta=1.0)
    for p in (0.1, 5.0, 1.0, 2.0):
        buf.add("x", p)
    assert buf.retire([1, 3]) == 2 and buf.live == 2 and len(buf) == 4
    _, idx, w = buf.sample(500, np.random.default_rng(0))
    assert set(idx.tolist()) <= {0, 2}
    assert np.all((w > 0) & (w <= 1.0))
    buf.update_priorities([1, 0], [100.0, 1.0])  # a refresh does not bring a retired item back
    assert not buf.is_live([1])[0]
    assert set(buf.sample(500, np.random.default_rng(1))[1].tolist()) <= {0, 2}
    buf.add("new", 1.0)  # the next slot (4) is reused as usual
    buf.add("newer", 1.0)
    buf.add("wraps", 1.0)  # slot 0
    assert buf.live == 4 and buf.total_retired == 2
    state = buf.state_dict(include_items=True)
    copy = PrioritizedReplay(capacity=6)
    copy.load_state_dict(state)
    assert copy.live == 4 and not copy.is_live([1, 3]).any()


def _learner(**cfg) -> tuple[Learner, np.random.Generator]:
    pol = toy_policy(0)
    base = {"batch_size": 4, "min_buffer": 2, "capacity": 32, "refresh_every": 1000}
    return Learner(pol, DistRLConfig(**{**base, **cfg}), BOX, seed=0), np.random.default_rng(0)


def test_lag_is_measured_at_sampling_time_and_bounded():
    learner, rng = _learner(max_staleness=3)
    for _ in range(12):  # one trajectory per version, as if the learner published each update
        tr = rollout(learner.policy, 4, rng)
        tr.policy_version = learner.version
        learner.ingest([tr])
        learner.version += 1
    assert learner.ready()
    lags = []
    for _ in range(5):
        stats = learner.update()
        lags.append(stats["sample_lag_max"])
        learner.version += 1  # the data age while it sits in the buffer
        tr = rollout(learner.policy, 4, rng)
        tr.policy_version = learner.version - 1
        learner.ingest([tr])
    assert max(lags) <= 3 and learner.ready()
    assert learner.replay.live <= 4 and learner.replay.total_retired >= 8
    learner.version += 10  # everything is now too old: no update until fresh data arrives
    assert not learner.ready()
    # without the limit the same buffer would have fed updates with data 12+ versions old
    free, rng = _learner(max_staleness=None)
    for v in range(12):
        tr = rollout(free.policy, 4, rng)
        tr.policy_version = v
        free.ingest([tr])
    free.version = 20
    assert free.update()["sample_lag_max"] > 3


def test_the_trust_region_stops_the_push_once_the_ratio_leaves_it():
    pol = toy_policy(1)
    rng = np.random.default_rng(1)
    tr = rollout(pol, 6, rng, rewards=np.ones(6))
    far = rollout(pol, 6, rng, rewards=np.ones(6))
    far.behaviour_logp = far.behaviour_logp - 2.0  # the policy moved far: rho = e^2 > 1 + eps

    def policy_grad(traj, clip):
        pol.zero_grad()
        out = aride_loss(pol, [traj], value_coef=0.0, clip=clip, gamma=0.0)
        out.loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in pol.parameters() if p.grad is not None])

    # on-policy data (rho = 1): the clipped surrogate has the unclipped gradient
    g_clip = policy_grad(tr, 0.2)
    assert g_clip.abs().sum() > 0
    # positive advantages and rho far above 1 + eps: no gradient at all through the policy term
    assert policy_grad(far, 0.2).abs().sum() == 0
    # without the trust region the same stale step still pushes
    assert policy_grad(far, None).abs().sum() > 0
    out = aride_loss(pol, [far], clip=0.2)
    assert out.stats["clip_frac"] == 1.0 and out.stats["approx_kl"] > 0.5


def test_value_loss_is_measured_in_units_of_the_return_scale():
    pol = toy_policy(2)
    tr = rollout(pol, 5, np.random.default_rng(2), rewards=np.full(5, 100.0))
    plain = aride_loss(pol, [tr]).stats["value_loss"]
    scaled = aride_loss(pol, [tr], value_scale=10.0).stats["value_loss"]
    assert np.isclose(scaled, plain / 100.0)


def test_normalised_priorities_follow_the_td_error_not_the_ratio():
    pol = toy_policy(3)
    rng = np.random.default_rng(3)
    small_td = rollout(pol, 5, rng, rewards=np.zeros(5))
    small_td.behaviour_logp = small_td.behaviour_logp - 20.0  # rho = e^20
    big_td = rollout(pol, 5, rng, rewards=np.full(5, 3.0))
    raw = trajectory_priorities(pol, [small_td, big_td])
    assert raw[0] > raw[1]  # unnormalised, the ratio term drowns the TD error
    fixed = trajectory_priorities(pol, [small_td, big_td], priority_scales=(1.0, 1.0),
                                  priority_rho_clip=1.0)  # fmt: skip
    assert fixed[1] > fixed[0]
    assert fixed[0] < 1.0 + 0.1 * 1.0 + 1.0  # bounded: |td| small, rho clipped at 1


def test_the_learner_keeps_running_scales_and_an_entropy_floor():
    learner, rng = _learner(entropy_target=10.0, entropy_coef=1e-3)  # far above any entropy
    learner.ingest([rollout(learner.policy, 5, rng) for _ in range(4)])
    coefs = [learner.update()["entropy_coef_now"] for _ in range(4)]
    assert coefs == sorted(coefs) and learner.entropy_coef > coefs[0] > 0
    assert {"value", "td", "neg_logp"} <= set(learner.scales)
    state = learner.state_dict()
    again, _ = _learner(entropy_target=10.0, entropy_coef=1e-3)
    again.load_state_dict(state)
    assert again.entropy_coef == learner.entropy_coef and again.scales == learner.scales
    # above the target the coefficient falls back to entropy_coef, never below it
    low, rng = _learner(entropy_target=-10.0, entropy_coef=1e-3)
    low.ingest([rollout(low.policy, 5, rng) for _ in range(4)])
    assert all(low.update()["entropy_coef_now"] == 1e-3 for _ in range(3))
