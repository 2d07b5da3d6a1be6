"""PPO in one file, CleanRL's way, on ``gym.make("evolve_envs/ReachPlace-v0")`` with no arguments.

The registered id builds its default stack: ReachPlace, its 50-step limit, and ``ProgressReward``
asking an embedded mock reward model (rule ``reach_place``, no GPU) for progress every 2 steps;
each sub-env starts its own model service and stops it when it closes. The script passes no
``config=``: it is what a training script that knows only an env id gets. Its wrappers are
CleanRL's continuous-action stack (``SyncVectorEnv`` with ``SAME_STEP`` autoreset, episode
statistics, observation and reward normalization), with the camera image filtered out of the
policy's input (the reward model sees it inside the stack).

Usage::

    pip install -e '.[service]' torch
    python examples/cleanrl_ppo_reach_place.py --total-timesteps 20000
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.normal import Normal

import evolve_envs  # noqa: F401  (registers the ids)


@dataclass
class Args:
    env_id: str = "evolve_envs/ReachPlace-v0"
    seed: int = 1
    total_timesteps: int = 20_000
    num_envs: int = 4
    num_steps: int = 128
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


def make_env(env_id: str, gamma: float):
    def thunk() -> gym.Env:
        env = gym.make(env_id)  # no kwargs: the id's default stack, time limit included
        env = gym.wrappers.FilterObservation(env, ["state"])
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(
            env, lambda obs: np.clip(obs, -10, 10), env.observation_space
        )
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        return gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -10, 10)))

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )  # fmt: skip
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01),
        )  # fmt: skip
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        probs = Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def train(args: Args) -> list[tuple[int, float, int]]:
    """Runs PPO; returns every finished episode as (global step, return, length)."""
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    iterations = args.total_timesteps // batch_size
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.gamma) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    act_dim = int(np.prod(envs.single_action_space.shape))
    agent = Agent(obs_dim, act_dim)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim))
    actions = torch.zeros((args.num_steps, args.num_envs, act_dim))
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    episodes: list[tuple[int, float, int]] = []
    global_step, start = 0, time.time()
    next_obs_np, _ = envs.reset(seed=args.seed)
    next_obs = torch.tensor(next_obs_np, dtype=torch.float32)
    next_done = torch.zeros(args.num_envs)
    try:
        for iteration in range(1, iterations + 1):
            frac = 1.0 - (iteration - 1.0) / iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            for step in range(args.num_steps):
                global_step += args.num_envs
                obs[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                next_obs_np, reward, terminations, truncations, infos = envs.step(action.numpy())
                rewards[step] = torch.tensor(reward, dtype=torch.float32)
                next_obs = torch.tensor(next_obs_np, dtype=torch.float32)
                ended = np.logical_or(terminations, truncations)
                next_done = torch.tensor(ended, dtype=torch.float32)
                final = infos.get("final_info", {})
                for i in np.flatnonzero(final.get("_episode", [])):
                    ret, length = float(final["episode"]["r"][i]), int(final["episode"]["l"][i])
                    episodes.append((global_step, ret, length))
                    print(f"global_step={global_step}, episodic_return={ret:.3f}, length={length}")

            with torch.no_grad():  # GAE
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(args.num_envs)
                for t in reversed(range(args.num_steps)):
                    nextnonterminal = 1.0 - (next_done if t == args.num_steps - 1 else dones[t + 1])
                    nextvalues = next_value if t == args.num_steps - 1 else values[t + 1]
                    delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                    lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns = advantages + values

            b_obs, b_actions = obs.reshape(-1, obs_dim), actions.reshape(-1, act_dim)
            b_logprobs, b_advantages = logprobs.reshape(-1), advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_inds = np.arange(batch_size)
            for _ in range(args.update_epochs):
                np.random.shuffle(b_inds)
                for lo in range(0, batch_size, minibatch_size):
                    mb = b_inds[lo : lo + minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs[mb], b_actions[mb]
                    )
                    ratio = (newlogprob - b_logprobs[mb]).exp()
                    adv = b_advantages[mb]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = torch.max(
                        -adv * ratio,
                        -adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef),
                    ).mean()
                    v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
                    loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()
            sps = int(global_step / (time.time() - start))
            print(f"iteration {iteration}/{iterations}: SPS={sps}")
    finally:
        envs.close()
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in vars(Args()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    train(Args(**vars(parser.parse_args())))


if __name__ == "__main__":
    main()
