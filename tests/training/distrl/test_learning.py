"""Replay + A-RIDE improve a policy on a tiny reach task with lagging actors (no Ray)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.distrl.loss import aride_loss
from evolve_envs.training.distrl.replay import PrioritizedReplay
from evolve_envs.training.policies.base import CNNGaussianPolicy

BOX = spaces.Box(-1.0, 1.0, (1,), np.float32)
T, N = 10, 8


class Reach1D:
    """Move a point on a line to a goal: state (x, goal), action a step, reward -|x - goal|,
    +2 and termination within 0.1 of the goal."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def reset(self, n: int) -> np.ndarray:
        return self.rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.clip(s[:, 0] + 0.3 * np.clip(a[:, 0], -1, 1), -1.5, 1.5)
        dist = np.abs(x - s[:, 1])
        done = dist < 0.1
        return np.stack([x, s[:, 1]], 1).astype(np.float32), (-dist + 2.0 * done), done


def collect(env: Reach1D, actor: CNNGaussianPolicy, version: int) -> list[Trajectory]:
    s = env.reset(N)
    obs, acts, logps, rews, dones = [s], [], [], [], []
    for _ in range(T):
        a, lp = actor.act(actor.encode_obs({"state": s}))
        s2, r, d = env.step(s, a)
        acts.append(a)
        logps.append(lp)
        rews.append(r)
        dones.append(d)
        s = np.where(d[:, None], env.reset(N), s2)  # auto-reset after a termination
        obs.append(s)
    return [
        Trajectory(
            obs={"state": np.stack([o[i] for o in obs])},
            actions=np.stack([x[i] for x in acts]),
            behaviour_logp=np.array([x[i] for x in logps], np.float32),
            rewards=np.array([x[i] for x in rews], np.float32),
            dones=np.array([x[i] for x in dones]),
            policy_version=version,
        )
        for i in range(N)
    ]


def evaluate(env: Reach1D, pol: CNNGaussianPolicy, n: int = 256) -> tuple[float, float]:
    s = env.reset(n)
    total, alive = np.zeros(n), np.ones(n, bool)
    for _ in range(T):
        a, _ = pol.act(pol.encode_obs({"state": s}), deterministic=True)
        s, r, d = env.step(s, a)
        total += r * alive
        alive &= ~d
    return float(total.mean()), float(1.0 - alive.mean())


@pytest.mark.slow
def test_prioritized_aride_learns_with_stale_actors():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    env = Reach1D(rng)
    pol = CNNGaussianPolicy(1, 2, image_key=None, hidden=32)
    actor = copy.deepcopy(pol)
    opt = torch.optim.Adam(pol.parameters(), lr=3e-3)
    buf: PrioritizedReplay[Trajectory] = PrioritizedReplay(200, alpha=0.6, beta=0.4)
    ret0, success0 = evaluate(env, pol)
    version, iters = 0, 50
    for it in range(iters):
        for tr in collect(env, actor, version):
            tr.validate()
            buf.add(tr, buf.max_priority)
        for _ in range(4):
            items, idx, w = buf.sample(16, rng)
            out = aride_loss(
                pol, items, w, gamma=0.9, lam=0.95, rho_bar=1.0, entropy_coef=1e-3,
                invalid_coef=0.1, value_coef=0.5, action_space=BOX,
            )  # fmt: skip
            opt.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
            opt.step()
            buf.update_priorities(idx, out.priorities)
        buf.anneal_beta(it / iters)
        if it % 3 == 0:  # the acting copy lags the learner by up to three iterations
            actor.load_state_dict(pol.state_dict())
            version += 1
    ret1, success1 = evaluate(env, pol)
    assert success0 < 0.3
    assert success1 > 0.8
    assert ret1 > ret0 + 3.0
