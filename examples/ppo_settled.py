"""PPO in one file (CleanRL's shape) on ReachPlace, the reward model off the critical path.

The vector env's stacks use ``reward_model.calls: deferred``: a step never waits for the reward
model. After each rollout, ``SettledRewards.settle()`` hands back, for every row of the rollout,
the reward and the done flags ``calls: sync`` would have produced for the same actions, and
``valid``: false on the rows that are not part of an episode (steps played after a model done,
next-step autoreset rows). Those rows are left out of the advantages and of the loss; everything
else is plain PPO. ``--calls sync`` runs the same loop with the env waiting for every check
(its rows come straight from ``step``), for comparison.

The policy sees ReachPlace's 3-number state; the reward model sees the camera image inside the
stack (a mock service, rule ``reach_place``, started by ``make_vec``; ``--endpoint`` for a real
one).

Usage::

    python examples/ppo_settled.py --iterations 30 --envs 4
    python examples/ppo_settled.py --iterations 30 --envs 4 --calls sync
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from evolve_envs import make_vec
from evolve_envs.wrappers.settled_rewards import SettledRewards

__all__ = ["Agent", "Rollout", "TrainResult", "advantages", "collect", "train"]


class Agent(nn.Module):
    """A Gaussian policy and a value function, two small MLPs."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, act_dim))
        self.critic = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 1))
        self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Normal(self.actor(obs), self.log_std.exp())
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(-1), dist.entropy().sum(-1), self.value(obs)


@dataclass
class Rollout:
    """One rollout, ``[steps, envs]`` per array; ``rewards`` / ``terminated`` / ``truncated`` /
    ``valid`` as the trainer learns from them."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    next_value: torch.Tensor
    cut_steps: int = 0  # steps played after a model done in the episodes settled here


def collect(vec: Any, agent: Agent, obs: np.ndarray, steps: int) -> tuple[Rollout, np.ndarray]:
    """Step ``vec`` ``steps`` times with the policy; the rows come from ``settle()`` (deferred)
    or from ``step`` (sync: the row after an episode's end is Gymnasium's autoreset row)."""
    n = vec.num_envs
    buf_obs, buf_act, buf_logp, buf_val = [], [], [], []
    rewards, terminated, truncated = (np.zeros((steps, n)) for _ in range(3))
    valid, after_end = np.ones((steps, n), bool), np.zeros(n, bool)
    for t in range(steps):
        x = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad():
            action, logp, _, value = agent.act(x)
        next_obs, reward, term, trunc, _ = vec.step(action.numpy())
        buf_obs.append(x), buf_act.append(action), buf_logp.append(logp), buf_val.append(value)
        rewards[t], terminated[t], truncated[t] = reward, term, trunc
        valid[t], after_end = ~after_end, term | trunc
        obs = next_obs["state"]
    cut = 0
    if isinstance(vec, SettledRewards):  # the rewards and dones sync would have returned
        settled = vec.settle()
        rewards, terminated, truncated, valid = (
            settled.rewards,
            settled.terminated,
            settled.truncated,
            settled.valid,
        )
        cut = sum(ep.cut_steps for _, ep in settled.episodes)
    with torch.no_grad():
        next_value = agent.value(torch.as_tensor(obs, dtype=torch.float32))
    rollout = Rollout(
        torch.stack(buf_obs),
        torch.stack(buf_act),
        torch.stack(buf_logp),
        torch.stack(buf_val),
        rewards,
        terminated.astype(bool),
        truncated.astype(bool),
        valid,
        next_value,
        cut,
    )
    return rollout, obs


def advantages(r: Rollout, gamma: float = 0.99, lam: float = 0.95) -> np.ndarray:
    """GAE over the valid rows; an invalid row is skipped (the chain goes on past it; the row
    before a run of invalid rows always ends its episode)."""
    values = r.values.numpy()
    adv = np.zeros_like(r.rewards)
    next_value, last = r.next_value.numpy(), np.zeros(r.rewards.shape[1])
    for t in reversed(range(len(r.rewards))):
        going_on = ~(r.terminated[t] | r.truncated[t])
        delta = r.rewards[t] + gamma * next_value * going_on - values[t]
        gae = delta + gamma * lam * going_on * last
        adv[t] = np.where(r.valid[t], gae, 0.0)
        last = np.where(r.valid[t], gae, last)
        next_value = np.where(r.valid[t], values[t], next_value)
    return adv


@dataclass
class TrainResult:
    agent: Agent
    returns: list[float] = field(default_factory=list)  # the settled episodes' returns
    valid_rows: int = 0
    cut_steps: int = 0
    seconds: float = 0.0


def train(
    iterations: int = 30,
    envs: int = 4,
    steps: int = 64,
    seed: int = 0,
    calls: str = "deferred",
    reward_model: dict[str, Any] | None = None,
    epochs: int = 4,
    lr: float = 3e-4,
) -> TrainResult:
    """Train PPO; ``reward_model`` sets keys of the ``reach_place`` config's block."""
    torch.manual_seed(seed)
    block = {**(reward_model or {}), "calls": calls}
    vec: Any = make_vec("reach_place", num_envs=envs, reward_model=block)
    if calls == "deferred":
        vec = SettledRewards(vec)
    agent = Agent(3, 2)
    opt = torch.optim.Adam(agent.parameters(), lr=lr)
    result = TrainResult(agent)
    start = time.perf_counter()
    try:
        obs = vec.reset(seed=seed)[0]["state"]
        episode_return = np.zeros(envs)
        for _ in range(iterations):
            r, obs = collect(vec, agent, obs, steps)
            for t in range(steps):  # the episodes' returns, from the rows they learn from
                episode_return += np.where(r.valid[t], r.rewards[t], 0.0)
                for i in np.flatnonzero(r.valid[t] & (r.terminated[t] | r.truncated[t])):
                    result.returns.append(float(episode_return[i]))
                    episode_return[i] = 0.0
            result.cut_steps += r.cut_steps
            adv = advantages(r)
            mask = torch.as_tensor(r.valid.reshape(-1))
            result.valid_rows += int(mask.sum())
            b_obs, b_act = r.obs.reshape(-1, 3)[mask], r.actions.reshape(-1, 2)[mask]
            b_logp, b_val = r.logprobs.reshape(-1)[mask], r.values.reshape(-1)[mask]
            b_adv = torch.as_tensor(adv.reshape(-1), dtype=torch.float32)[mask]
            b_ret = b_adv + b_val
            for _ in range(epochs):
                _, logp, _, value = agent.act(b_obs, b_act)
                ratio = (logp - b_logp).exp()
                norm = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
                pg = -torch.min(ratio * norm, ratio.clamp(0.8, 1.2) * norm).mean()
                loss = pg + 0.5 * ((value - b_ret) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
    finally:
        vec.close()
    result.seconds = time.perf_counter() - start
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--steps", type=int, default=64, help="rollout length per env")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calls", choices=["deferred", "sync"], default="deferred")
    p.add_argument("--endpoint", default=None, help="a reward service URL (default: a mock)")
    args = p.parse_args()
    block = {"endpoint": args.endpoint} if args.endpoint else {}
    result = train(args.iterations, args.envs, args.steps, args.seed, args.calls, block)
    returns = np.array(result.returns)
    print(
        f"{len(returns)} episodes in {result.seconds:.1f} s; mean return first 10 "
        f"{returns[:10].mean():.3f}, last 10 {returns[-10:].mean():.3f}"
    )


if __name__ == "__main__":
    main()
