"""The synchronous GRPO baseline on the same workers, policy and reward service.

Each round:

1. draw ``groups_per_round`` reset seeds and repeat each ``group_size`` times
   (:func:`evolve_envs.rl.grpo.group_seeds`): the episodes of a group start from one initial state;
2. broadcast the current weights once (``ray.put``) and hand the seeds to the workers in chunks of
   ``num_envs`` (:meth:`~evolve_envs.distrl.worker.RolloutWorker.collect_episodes`, one whole
   episode per env), then **wait for all of them** (the barrier DistRL does without);
3. score each episode (reward sum) and normalise within its group
   (:func:`evolve_envs.rl.grpo.grpo_advantages`, ``layout="batch_major"``);
4. ``epochs`` passes of PPO-clip (:func:`~evolve_envs.distrl.losses.ppo_clip_loss`) over every
   step in minibatches of ``minibatch_steps``, the behaviour log-probs as the old ones;
5. bump the policy version, log, checkpoint on the same cadence as DistRL.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from evolve_envs.distrl.async_trainer import Budget
from evolve_envs.distrl.checkpoint import save_checkpoint
from evolve_envs.distrl.config import TrainConfig
from evolve_envs.distrl.train_log import IntervalStats, TrainLog, format_row

__all__ = ["grpo_batch", "run_grpo"]


def grpo_batch(trajectories: list[Any], group_size: int) -> dict[str, Any]:
    """Flatten one round's episodes (in group order) into PPO inputs with GRPO advantages.

    Returns ``inputs`` (policy inputs of every acting step), ``actions``, ``old_logp``,
    ``advantages`` (each step carries its episode's group-normalised score) and ``scores``.

    Example:
        >>> import numpy as np
        >>> from evolve_envs.distrl.trajectory import Trajectory
        >>> def ep(r):
        ...     return Trajectory({"s": np.zeros((3, 1), np.float32)}, np.zeros((2, 1), np.float32),
        ...         np.zeros(2, np.float32), np.array([0.0, r], np.float32),
        ...         np.array([False, True]), 0)
        >>> b = grpo_batch([ep(1.0), ep(0.0)], group_size=2)
        >>> b["scores"].tolist(), b["advantages"].astype(float).round(3).tolist()
        ([1.0, 0.0], [0.707, 0.707, -0.707, -0.707])
    """
    from evolve_envs.rl.grpo import grpo_advantages

    lengths = [len(t) for t in trajectories]
    rewards = np.zeros((len(trajectories), max(lengths)), dtype=np.float64)
    dones = np.zeros_like(rewards, dtype=bool)
    for b, t in enumerate(trajectories):
        rewards[b, : len(t)] = t.rewards
        dones[b, len(t) - 1] = True  # the episode ended there (terminated or truncated)
    res = grpo_advantages(rewards, dones, group_size, layout="batch_major")
    adv = np.concatenate(
        [
            np.full(n, a, dtype=np.float32)
            for n, a in zip(lengths, res.group_advantages, strict=True)
        ]
    )
    keys = list(trajectories[0].obs)
    inputs = {k: np.concatenate([t.obs[k][:-1] for t in trajectories]) for k in keys}
    return {
        "inputs": inputs,
        "actions": np.concatenate([t.actions for t in trajectories]).astype(np.float32),
        "old_logp": np.concatenate([t.behaviour_logp for t in trajectories]).astype(np.float32),
        "advantages": adv,
        "scores": np.asarray(res.scores, dtype=np.float64),
    }


def run_grpo(
    worker_cfg: TrainConfig,
    cfg: TrainConfig,
    run_dir: Path,
    state: dict[str, Any] | None,
    log: TextIO,
    interactive: bool,
) -> tuple[dict[str, int], dict[str, Any]]:
    """Run GRPO rounds until the budget is spent; returns (counters, last metrics row)."""
    import ray
    import torch
    from tqdm.auto import tqdm

    from evolve_envs.distrl.losses import ppo_clip_loss
    from evolve_envs.distrl.worker import policy_from_config, start_workers
    from evolve_envs.rl.grpo import group_seeds

    g = cfg.grpo
    n_envs = cfg.workers.num_envs
    slots = cfg.workers.num_workers * n_envs
    groups = g.groups_per_round or max(1, slots // g.group_size)
    torch.manual_seed(cfg.run.seed)
    torch.set_num_threads(1)
    workers: list[Any] = []
    tlog = TrainLog(run_dir, tensorboard=cfg.run.tensorboard)
    bar = None
    try:
        workers = start_workers(worker_cfg, None, None)
        spaces = ray.get(workers[0].ready.remote())
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        optimizer = torch.optim.Adam(policy.parameters(), lr=g.lr)
        counters = {"updates": 0, "version": 0, "rounds": 0, "episodes": 0, "env_steps_in": 0}
        if state is not None:
            policy.load_state_dict(state["policy"])
            optimizer.load_state_dict(state["optimizer"])
            counters.update({k: int(v) for k, v in state["counters"].items()})
        rng = np.random.default_rng([cfg.run.seed, counters["rounds"]])
        budget = Budget(cfg.run.minutes, cfg.run.max_updates, counters["updates"])
        bar = tqdm(total=round(budget.seconds), unit="s", desc="grpo", disable=not interactive)
        stats = IntervalStats()
        last_log = last_ckpt = time.monotonic()
        last: dict[str, Any] = {}

        def checkpoint() -> None:
            payload = {
                "policy": policy.state_dict(),
                "optimizer": optimizer.state_dict(),
                "counters": dict(counters),
                "config": cfg.model_dump(),
                "algo": "grpo",
            }
            save_checkpoint(run_dir, payload)

        while not budget.done(counters["updates"]):
            seeds = group_seeds(groups * g.group_size, g.group_size, rng)
            weights = ray.put({k: v.detach().clone() for k, v in policy.state_dict().items()})
            calls = []
            for c, start in enumerate(range(0, len(seeds), n_envs)):
                worker = workers[c % len(workers)]
                chunk = seeds[start : start + n_envs]
                calls.append(worker.collect_episodes.remote(chunk, [weights], counters["version"]))
            trajs = [t for chunk in ray.get(calls) for t in chunk]  # the barrier
            for t in trajs:
                stats.trajectory(t, counters["version"])
            batch = grpo_batch(trajs, g.group_size)
            policy.train()
            n_steps = len(batch["actions"])
            for _ in range(g.epochs):
                order = rng.permutation(n_steps)
                for start in range(0, n_steps, g.minibatch_steps):
                    idx = order[start : start + g.minibatch_steps]
                    inputs = policy.to_inputs({k: v[idx] for k, v in batch["inputs"].items()})
                    out = ppo_clip_loss(
                        policy,
                        inputs,
                        torch.as_tensor(batch["actions"][idx]),
                        torch.as_tensor(batch["old_logp"][idx]),
                        torch.as_tensor(batch["advantages"][idx]),
                        clip=g.clip,
                        entropy_coef=g.entropy_coef,
                    )
                    optimizer.zero_grad(set_to_none=True)
                    out.loss.backward()
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), g.max_grad_norm)
                    optimizer.step()
                    counters["updates"] += 1
                    stats.updates += 1
                    stats.samples += len(idx)
            counters["version"] += 1
            counters["rounds"] += 1
            counters["episodes"] += len(trajs)
            counters["env_steps_in"] += n_steps
            now = time.monotonic()
            if now - last_log >= cfg.run.log_every_s:
                last = _grpo_row(counters, stats, budget, now - last_log, out)
                tlog.add(counters["updates"], last)
                if interactive:
                    bar.n = min(bar.total, round(budget.elapsed()))
                    bar.set_postfix(rounds=counters["rounds"], ret=last["return"])
                else:
                    print(format_row(last), file=log, flush=True)
                stats, last_log = IntervalStats(), now
            if now - last_ckpt >= cfg.run.checkpoint_every_s:
                checkpoint()
                last_ckpt = now
        if stats.trajectories or not last:
            last = _grpo_row(counters, stats, budget, time.monotonic() - last_log, None)
            tlog.add(counters["updates"], last)
            if not interactive:
                print(format_row(last), file=log, flush=True)
        checkpoint()
        return dict(counters), last
    finally:
        if bar is not None:
            bar.close()
        tlog.close()
        for w in workers:
            ray.kill(w, no_restart=True)


def _grpo_row(
    counters: dict[str, int], stats: IntervalStats, budget: Budget, elapsed: float, out: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "time_s": round(budget.elapsed(), 2),
        "updates_total": counters["updates"],
        "version": counters["version"],
        **stats.row(elapsed),
        "queue_depth": 0,
        "buffer_fill": float("nan"),
        "rounds": counters["rounds"],
    }
    if out is not None:
        row["loss"] = float(out.loss.detach())
        row.update({k: float(v) for k, v in dict(out.stats).items()})
    return row
