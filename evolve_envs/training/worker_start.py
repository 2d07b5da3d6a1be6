"""Starting the rollout workers: restartable Ray actors, each waited for until its envs are built.

``start_workers(cfg, registry, queue)`` creates ``workers.num_workers`` actors of
:class:`~evolve_envs.training.worker.RolloutWorker` placed as ``workers.*`` asks; a worker that
cannot start (a dead reward service, a bad env key) stops them all with :class:`WorkerStartError`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from evolve_envs.training.config import TrainConfig
from evolve_envs.training.runtime.remote_errors import remote_error
from evolve_envs.training.worker import RolloutWorker

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.util.queue import Queue

__all__ = ["WorkerStartError", "start_workers"]


class WorkerStartError(RuntimeError):
    """A rollout worker could not start (a dead reward service, a bad env key, ...).

    >>> err = WorkerStartError("rollout worker 1 failed to start: no service at :8001")
    >>> isinstance(err, RuntimeError), str(err).split(":")[0]
    (True, 'rollout worker 1 failed to start')
    """


def start_workers(
    config: TrainConfig,
    registry: ActorHandle,
    queue: Queue,
    *,
    num_workers: int | None = None,
    timeout_s: float = 600.0,
) -> list[ActorHandle]:
    """Create the worker actors (restartable) and wait until each has built its envs.

    The first start-up error (a dead reward service, a bad env key) raises
    :class:`WorkerStartError` naming the worker, after the others are killed.
    """
    import ray

    cfg = config
    n = num_workers if num_workers is not None else cfg.workers.num_workers
    from evolve_envs.training.runtime.placement import worker_actor_options

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
