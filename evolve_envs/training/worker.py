"""Rollout workers: Ray actors that step environments with the newest policy they have.

A :class:`RolloutWorker` builds ``num_envs`` envs from the run's typed stack config
(:mod:`evolve_envs.training.worker_env`) and one policy replica. Asynchronous (DistRL,
:meth:`RolloutWorker.run`): it polls the weight registry without blocking and pushes each
trajectory whose rewards are known (a full segment, an ended or a settled episode: one
:class:`~evolve_envs.training.episode.EpisodeSlot` per env, for every reward timing) into the
trajectory queue with ``put_nowait`` (a full queue drops and counts it). Synchronous (GRPO,
:meth:`RolloutWorker.collect_episodes`): one whole episode per given seed, through the same
slots. Restarts, settled episodes and the queue are described in docs/DISTRL.md.

>>> from evolve_envs.training.runtime.weight_registry import WeightRegistry
>>> reg = WeightRegistry()           # the plain class; start_workers uses the actor
>>> reg.publish(3, [None]); reg.poll(0, -1)["version"]
3
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.training.config import TrainConfig
from evolve_envs.training.episode import EpisodeSlot
from evolve_envs.training.runtime.pause import PAUSE_COUNTS, sit_out
from evolve_envs.training.settling import (
    SETTLING_COUNTS,
    episode_index,
    is_deferred,
    settled_source,
    settling_counts,
)
from evolve_envs.training.trajectory_push import TrajectoryPusher
from evolve_envs.training.worker_env import (
    Observation,
    StepResult,
    batch_obs,
    make_worker_env,
    policy_from_config,
    reward_transport,
    with_task,
    worker_stack,
)

if TYPE_CHECKING:
    import gymnasium as gym
    import torch
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from ray.util.queue import Queue

    from evolve_envs.training.common.trajectory import Trajectory

__all__ = [
    "RolloutWorker",
]


def _slice(inputs: Mapping[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    return {k: v[i] for k, v in inputs.items()}


def _worker_device() -> torch.device:
    """CUDA when Ray assigned this actor a GPU (``workers.num_gpus > 0``) and torch sees one,
    else the CPU."""
    import ray
    import torch

    if ray.is_initialized() and ray.get_gpu_ids() and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


class RolloutWorker:
    """Steps ``num_envs`` envs with a policy replica (``registry``/``queue``: None outside a run).

    >>> from evolve_envs.training.config import TrainConfig
    >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 5},
    ...                   reward_model={"enable": False})
    >>> worker = RolloutWorker(cfg, worker_id=0)
    >>> [traj] = worker.collect_episodes([7], None, version=0)  # one episode, reset seed 7
    >>> len(traj), traj.actions.shape, worker.placement()["device"]
    (5, (5, 2), 'cpu')
    >>> worker.close()
    """

    def __init__(
        self,
        config: TrainConfig,
        worker_id: int,
        registry: ActorHandle | None = None,
        queue: Queue | None = None,
    ) -> None:
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config: expected a TrainConfig, got {type(config).__name__}")
        self.cfg = config  # checked where the run loaded it; it arrives typed, not re-parsed
        self.worker_id = int(worker_id)
        self.registry = registry
        self.queue = queue
        self.incarnation = 1
        if registry is not None:
            import ray

            where = {"node_id": _node_id(), "reward": reward_transport(self.cfg, self.worker_id)}
            self.incarnation = ray.get(registry.hello.remote(self.worker_id, os.getpid(), where))
        self.rng = np.random.default_rng([self.cfg.run.seed, self.worker_id, self.incarnation])
        self.envs: list[gym.Env] = []
        with contextlib.ExitStack() as undo:  # a failure closes the envs built so far
            undo.callback(self.close)
            for _ in range(self.cfg.workers.num_envs):
                self.envs.append(make_worker_env(self.cfg, self.worker_id))
            undo.pop_all()
        import torch

        torch.set_num_threads(1)
        # subnormals slow the CPU's arithmetic (evolve_envs/training/common/subnormal.py)
        torch.set_flush_denormal(True)  # this process only acts: no default to restore
        self.policy = policy_from_config(
            self.cfg.policy, self.envs[0].observation_space, self.envs[0].action_space
        )
        self.device = _worker_device()
        self.policy.to(self.device)
        self.policy.eval()
        delays = self.cfg.workers.step_delay_s
        self.step_delay_s = float(delays[self.worker_id]) if delays else 0.0
        self.version = -1
        # one slot per env; calls: deferred: it keeps each episode until the model settles it
        self.deferred = is_deferred(worker_stack(self.cfg, self.worker_id))
        self.slots = [
            EpisodeSlot(settled_source(env) if self.deferred else None) for env in self.envs
        ]
        self.counts = {
            "pushed": 0,
            "dropped": 0,
            "env_steps": 0,
            "episodes": 0,
            **PAUSE_COUNTS,
            **SETTLING_COUNTS,
        }
        self._reported = dict.fromkeys(self.counts, 0)  # the part of counts the registry has

    # ------------------------------------------------------------------ helpers

    def ready(self) -> dict[str, object]:
        """Start-up handshake: pid, incarnation and the env's spaces."""
        env = self.envs[0]
        return {
            "pid": os.getpid(),
            "worker_id": self.worker_id,
            "incarnation": self.incarnation,
            "observation_space": env.observation_space,
            "action_space": env.action_space,
        }

    def placement(self) -> dict[str, object]:
        """Where this worker runs: the Ray resources assigned to it and the policy's device."""
        import ray

        resources: dict[str, float] = {}
        context = ray.get_runtime_context() if ray.is_initialized() else None
        if context is not None and context.get_actor_id() is not None:  # inside a Ray actor
            resources = dict(context.get_assigned_resources())
        return {
            "resources": resources,
            "device": str(self.device),
            "node_id": _node_id(),
            "reward": reward_transport(self.cfg, self.worker_id),
        }

    def _load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.policy.load_state_dict(state_dict)
        self.version = int(version)

    def _seed(self) -> int:
        return int(self.rng.integers(2**31 - 1))

    def _act(self, obs: list[Observation]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        import torch

        inputs = self.policy.encode_obs(batch_obs(obs))
        with torch.inference_mode():  # no autograd bookkeeping: the worker never trains
            actions, logp = self.policy.act(inputs)
        return inputs, np.asarray(actions, dtype=np.float32), np.asarray(logp, dtype=np.float32)

    def _step(self, env: gym.Env, action: np.ndarray) -> StepResult:
        """``env.step(action)``, then this worker's ``workers.step_delay_s`` of sleep."""
        result = env.step(action)
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)
        return result

    def _encode_one(self, obs: Observation) -> dict[str, np.ndarray]:
        return _slice(self.policy.encode_obs(batch_obs([obs])), 0)

    def _encoder(self, obs: Observation) -> Callable[[], dict[str, np.ndarray]]:
        """``obs`` encoded when asked (only a segment cut from a running episode needs it)."""
        return lambda: self._encode_one(obs)

    def _record_step(
        self,
        i: int,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        step: StepResult,
        nxt: Observation,
    ) -> bool:
        """Append one step of env ``i`` to its slot (its reward, unless the episode is settled
        later); returns whether the episode ended."""
        _, reward, terminated, truncated, info = step
        self.counts["env_steps"] += 1
        self.slots[i].add(
            inputs,
            action,
            logp,
            self.version,
            bool(info.get("is_success", False)),
            None if self.deferred else float(reward),
            bool(info.get("reward_model_fallback", False)),
        )
        ended = bool(terminated or truncated)
        if ended:
            self.slots[i].end(self._encode_one(nxt), info, bool(terminated))
            self.counts["episodes"] += 1
        return ended

    def _reset(self, i: int, seed: int) -> Observation:
        """Reset env ``i`` with ``seed``; its slot starts the episode (under the number the env
        gives it, which its settled record carries)."""
        obs, info = self.envs[i].reset(seed=seed)
        self.slots[i].start(episode_index(info) if self.deferred else None)
        return with_task(obs, info)

    # ------------------------------------------------------------------ asynchronous mode

    def run(self, max_seconds: float | None = None) -> dict[str, int]:
        """Collect until the registry says stop (or ``max_seconds``), never blocking."""
        import ray

        seg_len = self.cfg.workers.segment_length
        poll_every = self.cfg.workers.poll_every
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        obs = [self._reset(i, self._seed()) for i in range(len(self.envs))]
        pending = self.registry.poll.remote(self.worker_id, self.version)
        pusher = TrajectoryPusher(self.queue, self.counts)
        step = 0
        stop = False
        while not stop:
            # weights / stop: look at the last poll's answer only if it has arrived
            if step % poll_every == 0:
                done_refs, _ = ray.wait([pending], timeout=0)
                if done_refs:
                    answer = ray.get(pending)
                    stop = answer["stop"]
                    if answer["ref"] is not None and answer["ref"][0] is not None:
                        self._load(ray.get(answer["ref"][0]), answer["version"])
                    if answer.get("pause") and not stop:  # distrl.barrier: the learner trains
                        stop, waited_ms = sit_out(
                            self.registry, self.worker_id, self.version, self._load
                        )
                        self.counts["pauses"] += 1
                        self.counts["paused_ms"] += waited_ms
                    pending = self.registry.poll.remote(self.worker_id, self.version)
            if self.version < 0:  # nothing published yet: wait for the first weights
                ready, _ = ray.wait([pending], timeout=1.0)
                if not ready and deadline is not None and time.monotonic() > deadline:
                    break
                continue
            inputs, actions, logp = self._act(obs)
            for i, env in enumerate(self.envs):
                result = self._step(env, actions[i])
                nxt = with_task(result[0], result[4])
                ended = self._record_step(i, _slice(inputs, i), actions[i], logp[i], result, nxt)
                # whatever has its rewards: a full segment, an ended or a settled episode
                for traj in self.slots[i].ready(self.worker_id, seg_len, self._encoder(nxt)):
                    pusher.push(traj)
                obs[i] = self._reset(i, self._seed()) if ended else nxt
            pusher.count()
            step += 1
            if step % 20 == 0:
                self._report()
            if deadline is not None and time.monotonic() > deadline:
                break
        for slot in self.slots:  # the episodes that ended are handed on whole
            for traj in slot.ready(self.worker_id, seg_len, wait=True):
                pusher.push(traj)
        pusher.flush()
        self._report()
        return dict(self.counts)

    def _report(self) -> None:
        """Send the registry what was counted since the last report."""
        if self.deferred:
            self.counts.update(settling_counts(self.slots, self.envs))
        delta = {k: v - self._reported[k] for k, v in self.counts.items()}
        if any(delta.values()):
            self.registry.report.remote(self.worker_id, delta)  # fire and forget
            self._reported.update(self.counts)

    # ------------------------------------------------------------------ synchronous mode

    def collect_episodes(
        self,
        seeds: Sequence[int],
        weights: list[Mapping[str, torch.Tensor] | ObjectRef | None] | None,
        version: int,
    ) -> list[Trajectory]:
        """One whole episode per seed (env ``i`` reset with ``seeds[i]``), in seed order.

        ``weights[0]``: a state_dict or its ObjectRef (None keeps the current weights).
        """
        import ray

        if len(seeds) > len(self.envs):
            raise ValueError(f"{len(seeds)} seeds for {len(self.envs)} envs")
        if weights is not None and weights[0] is not None:
            sd = weights[0]
            self._load(ray.get(sd) if isinstance(sd, ray.ObjectRef) else sd, version)
        self.version = int(version)  # the version of the weights it holds, by the caller's count
        envs = self.envs[: len(seeds)]
        obs = [self._reset(i, int(s)) for i, s in enumerate(seeds)]
        out: list[Trajectory | None] = [None] * len(envs)
        live = list(range(len(envs)))
        while live:  # no env waits for the reward model with settled episodes
            inputs, actions, logp = self._act([obs[i] for i in live])
            still = []
            for j, i in enumerate(live):
                result = self._step(envs[i], actions[j])
                nxt = with_task(result[0], result[4])
                ended = self._record_step(i, _slice(inputs, j), actions[j], logp[j], result, nxt)
                if not ended:
                    obs[i] = nxt
                    still.append(i)
            live = still
        for i, slot in enumerate(self.slots[: len(envs)]):  # deferred: the last answers first
            trajs = slot.ready(self.worker_id, wait=True)
            if len(trajs) != 1:
                raise RuntimeError(f"env {i} settled {len(trajs)} episodes for one played")
            out[i] = trajs[0]
        if self.registry is not None:
            self._report()
        return [traj for traj in out if traj is not None]

    def close(self) -> None:
        """Close the envs (releasing an embedded reward service they hold)."""
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
        self.envs = []
