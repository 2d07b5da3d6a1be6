"""What an algorithm is to the shared training loop: the protocol, its context, the registry.

:func:`~evolve_envs.training.loop.run_loop` runs any :class:`Algorithm`; ``algo: NAME`` looks the
name up in the ``evolve_envs.algorithms`` entry points, or takes ``package.module:ClassName``.

>>> {"distrl", "grpo"} <= set(algorithm_names())
True
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from evolve_envs.training.config import TrainConfig

if TYPE_CHECKING:
    import gymnasium as gym
    import torch
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from ray.util.queue import Queue

    from evolve_envs.training.common.trajectory import Trajectory
    from evolve_envs.training.policies.base import Policy

__all__ = [
    "ENTRY_POINT_GROUP",
    "Algorithm",
    "Budget",
    "TrainContext",
    "RewardModelFailedError",
    "UpdateResult",
    "WorkerFailedError",
    "algorithm_names",
    "check_worker_calls",
    "get_from_workers",
    "make_algorithm",
]

ENTRY_POINT_GROUP = "evolve_envs.algorithms"
"""The entry-point group that names the algorithms (``distrl``, ``grpo``)."""


class WorkerFailedError(RuntimeError):
    """A rollout worker's call raised (not a crash Ray restarts): the run stops."""


class RewardModelFailedError(WorkerFailedError):
    """A rollout worker stopped because a reward-model call failed with
    ``reward_model.fail_on_request_error: true`` (strict mode): the run stops with a checkpoint."""


class Budget:
    """The run's budget: wall-clock minutes, an optional update cap, an optional env-step cap.

    >>> s = Budget(minutes=1.0, max_updates=None, max_env_steps=1000)
    >>> s.done(updates=3, env_steps=999), s.done(updates=3, env_steps=1000), s.fraction(3, 500)
    (False, True, 0.5)
    """

    def __init__(
        self,
        minutes: float,
        max_updates: int | None,
        start_updates: int = 0,
        max_env_steps: int | None = None,
        start_env_steps: int = 0,
    ) -> None:
        self.t0 = time.monotonic()
        self.seconds = minutes * 60.0
        self.max_updates = max_updates
        self.start_updates = start_updates
        self.max_env_steps = max_env_steps
        self.start_env_steps = start_env_steps

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def fraction(self, updates: int, env_steps: int = 0) -> float:
        """Share of the budget spent (the largest of time, updates and env steps)."""
        frac = self.elapsed() / self.seconds
        if self.max_updates:
            frac = max(frac, (updates - self.start_updates) / self.max_updates)
        if self.max_env_steps:
            frac = max(frac, (env_steps - self.start_env_steps) / self.max_env_steps)
        return min(1.0, frac)

    def done(self, updates: int, env_steps: int = 0) -> bool:
        if self.max_updates is not None and updates - self.start_updates >= self.max_updates:
            return True
        if (
            self.max_env_steps is not None
            and env_steps - self.start_env_steps >= self.max_env_steps
        ):
            return True
        return self.elapsed() >= self.seconds


@dataclass
class TrainContext:
    """What the loop hands an algorithm in :meth:`Algorithm.setup`.

    ``workers`` are the rollout-worker actor handles, ``registry`` the weight registry actor,
    ``queue`` the bounded trajectory queue, ``policy`` the learner's policy (on ``device``),
    ``spaces`` the env's ``observation_space`` / ``action_space``.
    """

    cfg: TrainConfig
    workers: list[ActorHandle]
    registry: ActorHandle
    queue: Queue
    policy: Policy
    spaces: dict[str, gym.Space]
    device: torch.device | str = "cpu"


@dataclass
class UpdateResult:
    """What one :meth:`Algorithm.update` did: optimizer steps and samples (trajectories or
    steps) they used."""

    updates: int = 0
    samples: int = 0
    stats: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Algorithm(Protocol):
    """A training algorithm run by :func:`run_loop`.

    * ``name`` — recorded in checkpoints (a resume must use the same algorithm);
    * ``setup(ctx)`` — build the learner state (optimizer, replay) for ``ctx.policy``;
    * ``start()`` — begin collecting (publish the first weights, start worker loops);
    * ``collect() -> trajectories`` — what arrived since the last call (may block, e.g. a
      synchronous round, or return ``[]``);
    * ``update(trajectories, budget_fraction) -> UpdateResult`` — learn from them (0 updates
      allowed: the loop then sleeps a little);
    * ``counters()`` — at least ``updates`` and ``version`` (the policy version workers act with);
    * ``metrics()`` — the algorithm's own columns for the metrics row;
    * ``running_calls()`` — worker calls that must not end before the stop (health check);
    * ``state_dict()`` / ``load_state_dict(state)`` — everything a resume needs (must hold
      ``counters``);
    * ``stop()`` — ask the workers to stop and wait briefly.
    """

    name: str

    def setup(self, ctx: TrainContext) -> None: ...
    def start(self) -> None: ...
    def collect(self) -> list[Trajectory]: ...
    def update(self, trajectories: list[Trajectory], budget_fraction: float) -> UpdateResult: ...
    def counters(self) -> dict[str, int]: ...
    def metrics(self) -> dict[str, object]: ...
    def running_calls(self) -> list[ObjectRef]: ...
    def state_dict(self) -> dict[str, object]: ...
    def load_state_dict(self, state: dict[str, object]) -> None: ...
    def stop(self) -> None: ...


def algorithm_names() -> list[str]:
    """The registered algorithm names (entry points of the ``evolve_envs.algorithms`` group)."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def make_algorithm(name: str) -> Algorithm:
    """A fresh algorithm by its registered name (``distrl``, ``grpo``, …: an entry point of the
    ``evolve_envs.algorithms`` group) or import path (``package.module:ClassName``, a class with
    the :class:`Algorithm` methods).

    Example:
        >>> make_algorithm("grpo").name
        'grpo'
    """
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    try:
        if found:
            cls = found[0].load()
        else:
            module_name, sep, attr = name.partition(":")
            if not sep:
                known = ", ".join(algorithm_names())
                raise ValueError(f"unknown algorithm (registered: {known})")
            cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"algo: cannot load {name!r} ({exc})") from exc
    algo = cls()
    if not isinstance(algo, Algorithm):
        raise ValueError(f"algo: {name!r} does not have the Algorithm methods")
    return algo


def _worker_error(index: int, exc: BaseException) -> WorkerFailedError:
    from evolve_envs.reward.clients.errors import RewardServiceError
    from evolve_envs.training.runtime.remote_errors import remote_error

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, RewardServiceError):
        nxt = getattr(cause, "cause", None)
        cause = nxt if isinstance(nxt, BaseException) and nxt is not cause else None
    kind = WorkerFailedError if cause is None else RewardModelFailedError
    return kind(f"rollout worker {index} stopped: {remote_error(exc)}")


def check_worker_calls(calls: list[ObjectRef]) -> None:
    """Raise :class:`WorkerFailedError` if one of the workers' running calls (worker ``i``'s at
    index ``i``) ended before the stop; never blocks."""
    import ray

    if not calls:
        return
    finished, _ = ray.wait(calls, num_returns=len(calls), timeout=0)
    for ref in finished:
        try:
            ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - re-raised with the worker named
            raise _worker_error(calls.index(ref), exc) from exc
        raise WorkerFailedError(f"rollout worker {calls.index(ref)} returned before the stop")


def get_from_workers(calls: list[ObjectRef], owners: list[int]) -> list[object]:
    """``ray.get`` of worker calls (``owners[i]`` made ``calls[i]``); an error names the worker
    as :class:`WorkerFailedError`. Calls on a process that died are retried by Ray."""
    import ray

    out = []
    for ref, owner in zip(calls, owners, strict=True):
        try:
            out.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - re-raised with the worker named
            raise _worker_error(owner, exc) from exc
    return out
