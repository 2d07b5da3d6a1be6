"""Rollout workers: Ray actors that step environments with the newest policy they have.

A :class:`RolloutWorker` builds ``num_envs`` environments with
:func:`evolve_envs.stack.factory.make_env` (:mod:`evolve_envs.train.worker_env` holds the builders)
from the training config's ``env`` + ``reward_model`` blocks (any Gymnasium ID through
``env.id``, or LIBERO with the reward stack), and one policy replica. It works in two modes:

* **asynchronous** (DistRL): :meth:`RolloutWorker.run` loops until the
  :class:`~evolve_envs.train.weight_registry.WeightRegistry` says
  stop. Between steps it checks — without blocking — whether the learner published newer weights
  (a version number plus an object-store reference) and loads them; it pushes every finished
  episode (or every ``segment_length`` steps) as one validated
  :class:`~evolve_envs.train.trajectory.Trajectory` into the trajectory queue with
  ``put_nowait``, without waiting for the queue actor's answer (it is counted ``pushed`` or
  ``dropped`` when it arrives, a few steps later). Nobody waits for anybody: a slow worker only
  pushes less often (``workers.step_delay_s`` slows chosen workers down: a sleep after each of
  their env steps, in both modes). When the queue is full the trajectory is dropped and counted
  (``dropped``), never half-pushed.
* **synchronous** (GRPO): :meth:`RolloutWorker.collect_episodes` plays one whole episode per env
  from the given reset seeds with the given weights and returns them.

**Settled episodes** (``reward_model.calls: deferred``, the training configs' default): the env
never waits for the reward model, so a step's reward is not known when the step returns. Each
env's episode is kept (:mod:`evolve_envs.train.settling`) until the reward model has answered
its last check; the trajectory the worker then pushes carries the settled rewards, ends at the
step of a model-judged done (the steps played after it are cut and counted) and is exactly what
``calls: sync`` would have produced for the same actions. In :meth:`~RolloutWorker.run` a
trajectory is pushed when its episode settles (``segment_length`` cuts a settled episode into
segments, pushed together); in :meth:`~RolloutWorker.collect_episodes` every env plays its
episode without waiting and the call then waits for the last answers only.

The actor is created with ``max_restarts`` and ``max_task_retries=-1`` (:func:`start_workers`):
when its process dies, Ray starts a new one (the constructor rebuilds the envs and the policy)
and re-submits the interrupted :meth:`~RolloutWorker.run` call, so collection continues; the
registry counts the worker's incarnations.

A reward service that is down when a worker starts fails its constructor
(``ServiceUnavailableError`` from the stack's start-up check); :func:`start_workers` raises it at
once with the worker's index. Fallback rewards during a run are counted per episode
(``episode_stats[i]["fallbacks"]``).

Example:
    >>> import ray, gymnasium as gym
    >>> from evolve_envs.train.weight_registry import WeightRegistry
    >>> reg = WeightRegistry()           # the plain class; start_workers uses the actor
    >>> reg.publish(3, [None]); reg.poll(0, -1)["version"]
    3
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.train.config import TrainConfig
from evolve_envs.train.episode_slot import EnvSlot
from evolve_envs.train.pause import PAUSE_COUNTS, sit_out
from evolve_envs.train.remote_errors import remote_error
from evolve_envs.train.settling import (
    SETTLING_COUNTS,
    episode_index,
    settling_counts,
    settling_slots,
)
from evolve_envs.train.worker_env import (
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

    from evolve_envs.train.trajectory import Trajectory

__all__ = [
    "RolloutWorker",
    "WorkerStartError",
    "start_workers",
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


class WorkerStartError(RuntimeError):
    """A rollout worker could not start (a dead reward service, a bad env key, ...)."""


class RolloutWorker:
    """Steps ``num_envs`` envs with a policy replica; see the module docstring.

    Args:
        config: the run's :class:`~evolve_envs.train.config.TrainConfig` (checked where it was
            loaded; an actor gets a pickled copy).
        worker_id: index of this worker (picks its ``workers.env_overrides`` entry).
        registry: the :class:`~evolve_envs.train.weight_registry.WeightRegistry` actor handle
            (None in :meth:`collect_episodes`-only use).
        queue: a ``ray.util.queue.Queue`` (or anything with ``put_nowait``) for trajectories.

    Example (the plain class, in this process; :func:`start_workers` makes Ray actors of it):
        >>> from evolve_envs.train.config import TrainConfig
        >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 5},
        ...                   reward_model={"enable": False})
        >>> worker = RolloutWorker(cfg, worker_id=0)
        >>> [traj] = worker.collect_episodes([7], None, version=0)  # one episode, reset seed 7
        >>> len(traj), traj.actions.shape, sorted(traj.obs)
        (5, (5, 2), ['image', 'state'])
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
        self.policy = policy_from_config(
            self.cfg.policy, self.envs[0].observation_space, self.envs[0].action_space
        )
        self.device = _worker_device()
        self.policy.to(self.device)
        self.policy.eval()
        delays = self.cfg.workers.step_delay_s
        self.step_delay_s = float(delays[self.worker_id]) if delays else 0.0
        self.version = -1
        # calls: deferred: one slot per env keeps each episode until the reward model settles it
        self.settling = settling_slots(worker_stack(self.cfg, self.worker_id), self.envs)
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
        """Where this worker runs: the Ray resources assigned to it and the policy's device.

        Example (the plain class outside Ray: no resources, CPU):
            >>> from evolve_envs.train.config import TrainConfig
            >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0"},
            ...                   reward_model={"enable": False})
            >>> w = RolloutWorker(cfg, 0); w.placement()["device"]; w.close()
            'cpu'
        """
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

    def _record_step(
        self,
        slot: EnvSlot,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        step: StepResult,
    ) -> bool:
        """Append one env step to ``slot``; returns whether the episode ended (its stats are
        then kept too)."""
        _, reward, terminated, truncated, info = step
        self.counts["env_steps"] += 1
        fallback = bool(info.get("reward_model_fallback", False))
        slot.add(inputs, action, logp, float(reward), bool(terminated), self.version, fallback)
        ended = bool(terminated or truncated)
        if ended:
            slot.end_episode(info, bool(terminated))
            self.counts["episodes"] += 1
        return ended

    def _reset(self, i: int, seed: int) -> Observation:
        """Reset env ``i`` with ``seed``; with settled episodes, its slot starts the episode."""
        obs, info = self.envs[i].reset(seed=seed)
        if self.settling is not None:
            self.settling[i].start(episode_index(info))
        return with_task(obs, info)

    def _play_step(
        self,
        i: int,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        step: StepResult,
        nxt: Observation,
    ) -> bool:
        """Keep one step of env ``i``'s episode until it is settled (its reward is not known
        yet); returns whether the episode ended."""
        _, _, terminated, truncated, info = step
        self.counts["env_steps"] += 1
        slot = self.settling[i]  # type: ignore[index]
        slot.add(inputs, action, logp, self.version, bool(info.get("is_success", False)))
        ended = bool(terminated or truncated)
        if ended:
            slot.end(self._encode_one(nxt))
            self.counts["episodes"] += 1
        return ended

    # ------------------------------------------------------------------ asynchronous mode

    def run(self, max_seconds: float | None = None) -> dict[str, int]:
        """Collect until the registry says stop (or ``max_seconds``); returns this
        incarnation's counters. Never blocks on the learner."""
        import ray

        seg_len = self.cfg.workers.segment_length
        poll_every = self.cfg.workers.poll_every
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        slots = [EnvSlot() for _ in self.envs]
        obs = [self._reset(i, self._seed()) for i in range(len(self.envs))]
        pending = self.registry.poll.remote(self.worker_id, self.version)
        puts: list[ObjectRef] = []  # queue puts not yet answered
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
                    if answer.get("pause") and not stop:  # learner.barrier: the learner trains
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
                if self.settling is None:  # rewards known at the step: push as it goes
                    slot = slots[i]
                    ended = self._record_step(slot, _slice(inputs, i), actions[i], logp[i], result)
                    if ended or (seg_len is not None and len(slot.actions) >= seg_len):
                        self._push(slot.trajectory(self._encode_one(nxt), self.worker_id), puts)
                else:  # push what the reward model has settled
                    ended = self._play_step(i, _slice(inputs, i), actions[i], logp[i], result, nxt)
                    for traj in self.settling[i].settle(self.worker_id, seg_len):
                        self._push(traj, puts)
                obs[i] = self._reset(i, self._seed()) if ended else nxt
            if puts:
                self._count_puts(puts)
            step += 1
            if step % 20 == 0:
                self._report()
            if deadline is not None and time.monotonic() > deadline:
                break
        for slot in self.settling or ():  # the episodes that ended are handed on whole
            for traj in slot.settle(self.worker_id, seg_len, wait=True):
                self._push(traj, puts)
        self._count_puts(puts, wait=True)
        self._report()
        return dict(self.counts)

    #: Queue puts in flight at most. One: a put is sent only once the previous one was answered
    #: (normally long before: an episode or segment later), so trajectories reach the queue in
    #: the order they were made (the queue's actor is asynchronous: two puts in flight together,
    #: each waiting for its large argument, may be run in either order).
    MAX_PUTS_IN_FLIGHT = 1

    def _push(self, traj: Trajectory, puts: list[ObjectRef]) -> None:
        """Put ``traj`` into the queue without waiting for the queue's answer when it is a
        ``ray.util.queue.Queue`` (the call goes to its actor; :meth:`_count_puts` counts it
        pushed or dropped when the answer arrives, in submission order on the queue's side); any
        other queue is called and counted at once."""
        from ray.util.queue import Full

        actor = getattr(self.queue, "actor", None)
        if actor is None:
            try:
                self.queue.put_nowait(traj)
                self.counts["pushed"] += 1
            except Full:
                self.counts["dropped"] += 1
            return
        if len(puts) >= self.MAX_PUTS_IN_FLIGHT:
            self._count_puts(puts, wait=True, keep=self.MAX_PUTS_IN_FLIGHT - 1)
        puts.append(actor.put_nowait.remote(traj))

    def _count_puts(self, puts: list[ObjectRef], wait: bool = False, keep: int = 0) -> None:
        """Count the answered puts of ``puts`` as pushed or dropped (a full queue) and remove
        them; with ``wait``, first wait until at most ``keep`` are unanswered."""
        import asyncio

        import ray

        if not puts:
            return
        if wait:
            ray.wait(puts, num_returns=len(puts) - keep)
        done, _ = ray.wait(puts, num_returns=len(puts), timeout=0)
        for ref in done:
            puts.remove(ref)
            try:
                ray.get(ref)
                self.counts["pushed"] += 1
            except asyncio.QueueFull:  # the queue actor's error, re-raised here
                self.counts["dropped"] += 1

    def _report(self) -> None:
        """Send the registry what was counted since the last report (each count once, however
        many :meth:`run` calls this incarnation makes)."""
        if self.settling is not None:
            self.counts.update(settling_counts(self.settling, self.envs))
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
        """Play one whole episode per seed (``len(seeds) <= num_envs``, env ``i`` reset with
        ``seeds[i]``) with ``weights[0]`` (a state_dict or its ObjectRef; None keeps the
        current ones, which are then counted as ``version``) and return them as trajectories,
        in seed order."""
        import ray

        if len(seeds) > len(self.envs):
            raise ValueError(f"{len(seeds)} seeds for {len(self.envs)} envs")
        if weights is not None and weights[0] is not None:
            sd = weights[0]
            self._load(ray.get(sd) if isinstance(sd, ray.ObjectRef) else sd, version)
        self.version = int(version)  # the version of the weights it holds, by the caller's count
        envs = self.envs[: len(seeds)]
        slots = [EnvSlot() for _ in envs]
        obs = [self._reset(i, int(s)) for i, s in enumerate(seeds)]
        out: list[Trajectory | None] = [None] * len(envs)
        live = list(range(len(envs)))
        while live:  # no env waits for the reward model with settled episodes
            inputs, actions, logp = self._act([obs[i] for i in live])
            still = []
            for j, i in enumerate(live):
                result = self._step(envs[i], actions[j])
                nxt = with_task(result[0], result[4])
                if self.settling is not None:
                    ended = self._play_step(i, _slice(inputs, j), actions[j], logp[j], result, nxt)
                elif self._record_step(slots[i], _slice(inputs, j), actions[j], logp[j], result):
                    out[i] = slots[i].trajectory(self._encode_one(nxt), self.worker_id)
                    ended = True
                else:
                    ended = False
                if not ended:
                    obs[i] = nxt
                    still.append(i)
            live = still
        for i, slot in enumerate((self.settling or [])[: len(envs)]):  # the barrier: last answers
            trajs = slot.settle(self.worker_id, wait=True)
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


def start_workers(
    config: TrainConfig,
    registry: ActorHandle,
    queue: Queue,
    *,
    num_workers: int | None = None,
    timeout_s: float = 600.0,
) -> list[ActorHandle]:
    """Create the worker actors (restartable) and wait until each has built its envs.

    Raises the first worker's start-up error (a dead reward service, a bad env key) as a
    :class:`WorkerStartError` naming the worker, after killing the ones that did start.
    """
    import ray

    cfg = config
    n = num_workers if num_workers is not None else cfg.workers.num_workers
    from evolve_envs.train.placement import worker_actor_options

    actor_cls = ray.remote(RolloutWorker).options(**worker_actor_options(cfg))
    workers = [actor_cls.remote(cfg, i, registry, queue) for i in range(n)]
    ready = [w.ready.remote() for w in workers]
    with contextlib.ExitStack() as undo:  # a worker that fails to start stops them all
        for w in workers:
            undo.callback(ray.kill, w, no_restart=True)
        for i, ref in enumerate(ready):
            try:
                ray.get(ref, timeout=timeout_s)
            except Exception as exc:  # noqa: BLE001 - re-raised with the worker named
                raise WorkerStartError(
                    f"rollout worker {i} failed to start: {remote_error(exc)}"
                ) from exc
        undo.pop_all()
    return workers
