"""Behaviour cloning: a training config's policy fitted to the scripted LIBERO expert.

:func:`expert_episodes` plays the expert (:mod:`evolve_envs.envs.libero_expert`) on the config's
env (reward model off) from the given init states and keeps the successful episodes' policy
inputs and actions; :func:`clone_policy` fits the config's policy to them by the Gaussian
log-likelihood of the expert's actions (its mean and its ``log_std``), Adam, minibatches drawn
with ``seed``. ``evolve-envs clone`` writes the result as a policy file that
``policy.init_from`` starts a training run from (docs/libero-rl.md).

Example (needs the simulator, so skipped here; tests/training/test_clone.py runs it):
    >>> from evolve_envs.training.config import load_train_config  # doctest: +SKIP
    >>> cfg = load_train_config("libero_object_finetune")  # doctest: +SKIP
    >>> demos = expert_episodes(cfg, [0, 1])  # doctest: +SKIP
    >>> policy, report = clone_policy(cfg, demos, steps=200, seed=900)  # doctest: +SKIP
    >>> report.samples > 0  # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from evolve_envs.training.config import TrainConfig
    from evolve_envs.training.policies.base import Policy

__all__ = ["CloneReport", "ExpertEpisodes", "clone_policy", "expert_episodes"]


@dataclass
class ExpertEpisodes:
    """The expert's successful episodes as policy inputs (observations as the env returns them,
    stacked per key) and actions ``[N, A]``; ``played`` and ``succeeded`` list init state ids."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    played: list[int] = field(default_factory=list)
    succeeded: list[int] = field(default_factory=list)
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None


@dataclass(frozen=True)
class CloneReport:
    """What :func:`clone_policy` fitted: samples, steps, the seed and the loss at the start and
    the end (negative log-likelihood per sample).

    >>> CloneReport(1200, 2000, 900, 8.1, -9.5).as_dict()["samples"]
    1200
    """

    samples: int
    steps: int
    seed: int
    loss_first: float
    loss_last: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _plain_env(cfg: TrainConfig) -> gym.Env:
    """The config's training env with the reward model and recording off."""
    from evolve_envs.stack.config import ProgressModelConfig
    from evolve_envs.stack.factory import make_env

    off = ProgressModelConfig(enable=False)
    return make_env(cfg.model_copy(update={"reward_model": off, "record": None}).stack())


def expert_episodes(
    cfg: TrainConfig,
    init_states: Sequence[int],
    *,
    noisy_repeats: int = 0,
    noise: float = 0.3,
    on_episode: Callable[[int, bool, int], None] | None = None,
) -> ExpertEpisodes:
    """Play the scripted expert from each init state on ``cfg``'s env, once as it is and
    ``noisy_repeats`` more times with Gaussian noise (``noise``) added to the motion it executes
    while the expert's own action is kept as the label (DART: the clone sees the states just off
    the expert's path and how the expert gets back); keep the episodes that succeed.
    ``on_episode(init_state, success, steps)`` is called after each."""
    from evolve_envs.envs.libero_expert import ScriptedExpert

    env = _plain_env(cfg)
    obs_rows: dict[str, list[np.ndarray]] = {}
    act_rows: list[np.ndarray] = []
    out = ExpertEpisodes({}, np.zeros((0, 0), np.float32))
    out.observation_space, out.action_space = env.observation_space, env.action_space
    try:
        plays = [(int(i), r) for r in range(1 + int(noisy_repeats)) for i in init_states]
        for init, repeat in plays:
            rng = np.random.default_rng([int(init), repeat])
            scale = noise if repeat else 0.0
            obs, _ = env.reset(seed=int(init), options={"init_state_id": int(init)})
            expert = ScriptedExpert(seed=int(init))
            expert.reset(env)
            episode_obs: list[dict[str, np.ndarray]] = []
            episode_act: list[np.ndarray] = []
            success, ended = False, False
            while not ended:
                action = expert.act(env)
                episode_obs.append({k: np.asarray(v) for k, v in obs.items()})
                episode_act.append(np.asarray(action, np.float32))
                played = np.array(action, np.float32)
                played[:6] += scale * rng.standard_normal(6).astype(np.float32)
                obs, _, terminated, truncated, info = env.step(np.clip(played, -1.0, 1.0))
                success = bool(info.get("is_success", False))
                ended = terminated or truncated
            out.played.append(int(init))
            if success:
                out.succeeded.append(int(init))
                for row in episode_obs:
                    for k, v in row.items():
                        obs_rows.setdefault(k, []).append(v)
                act_rows.extend(episode_act)
            if on_episode is not None:
                on_episode(int(init), success, len(episode_act))
    finally:
        env.close()
    if not act_rows:
        raise ValueError(
            f"the scripted expert succeeded from none of the init states {list(init_states)}; "
            "there is nothing to clone"
        )
    out.observations = {k: np.stack(v) for k, v in obs_rows.items()}
    out.actions = np.clip(np.stack(act_rows), -1.0, 1.0).astype(np.float32)
    return out


def clone_policy(
    cfg: TrainConfig,
    demos: ExpertEpisodes,
    *,
    steps: int = 2000,
    seed: int = 0,
    batch_size: int = 256,
    lr: float = 1e-3,
) -> tuple[Policy, CloneReport]:
    """Fit ``cfg.policy`` to ``demos``: minimise the negative log-likelihood of the expert's
    actions under the policy's Gaussian, ``steps`` Adam steps on minibatches drawn with
    ``seed``. Returns the policy (on the CPU) and a :class:`CloneReport`."""
    import torch

    from evolve_envs.training.worker_env import policy_from_config

    if demos.observation_space is None or demos.action_space is None:
        raise ValueError("clone_policy: the demonstrations carry no spaces")
    torch.manual_seed(seed)
    policy = policy_from_config(cfg.policy, demos.observation_space, demos.action_space)
    inputs = policy.to_inputs(policy.encode_obs(demos.observations))
    if getattr(policy, "state_norm", False):
        state = inputs[cfg.policy.state_key]
        with torch.no_grad():
            policy.state_mean.copy_(state.mean(0))
            policy.state_std.copy_(state.std(0).clamp_min(0.05))
    actions = torch.as_tensor(demos.actions)
    n = int(actions.shape[0])
    optim = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    first = last = float("nan")
    for step in range(int(steps)):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=gen)
        dist, _ = policy({k: v[idx] for k, v in inputs.items()})
        loss = -dist.log_prob(actions[idx]).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        if step == 0:
            first = float(loss.detach())
        last = float(loss.detach())
    policy.eval()
    return policy, CloneReport(n, int(steps), int(seed), first, last)
