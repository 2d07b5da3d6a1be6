"""The asynchronous DistRL loop: workers collect, the learner learns, nobody waits.

:func:`run_distrl` starts a :class:`~evolve_envs.distrl.worker.WeightRegistry` actor, a bounded
``ray.util.queue.Queue`` of trajectories and ``workers.num_workers`` restartable
:class:`~evolve_envs.distrl.worker.RolloutWorker` actors, publishes the initial weights and
starts every worker's :meth:`~evolve_envs.distrl.worker.RolloutWorker.run` loop. The learner (this
process) then repeats until the budget is spent:

* drain whatever is queued into the replay (priorities from the current policy),
* one A-RIDE update when the buffer holds ``min_buffer`` trajectories and the sample ratio
  (trajectories sampled per trajectory taken in) is below ``max_sample_ratio`` (on a small box
  the learner would otherwise take the CPU the workers need),
* publish the weights every ``publish_every`` updates (``ray.put`` + the registry),
* a metrics row every ``run.log_every_s`` and a checkpoint every ``run.checkpoint_every_s`` (or
  ``checkpoint_every_updates``).

At the end it asks the workers to stop, waits briefly for them and writes a final checkpoint.

A worker whose *process* dies is restarted by Ray and goes on collecting. A worker whose
``run`` loop *raises* (for example a reward service outage with ``fail_on_request_error: true``,
the stack's fail-fast policy) is not restarted: the learner notices within a second, writes a
checkpoint and stops the run with a :class:`WorkerFailedError` naming the worker and the cause,
so ``--resume`` can continue once the cause is fixed. With the default fallback policy an outage
only shows as counted ``fallbacks`` in the metrics.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from evolve_envs.distrl.checkpoint import save_checkpoint
from evolve_envs.distrl.config import TrainConfig
from evolve_envs.distrl.train_log import IntervalStats, TrainLog, format_row

__all__ = ["Budget", "WorkerFailedError", "run_distrl"]


class WorkerFailedError(RuntimeError):
    """A rollout worker's collection loop raised (not a crash Ray restarts): the run stops."""


def _check_workers(runs: list[Any]) -> None:
    """Raise :class:`WorkerFailedError` if a worker's ``run`` call ended before the stop."""
    import ray

    finished, _ = ray.wait(runs, num_returns=len(runs), timeout=0)
    for ref in finished:
        try:
            ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - re-raised with the worker named
            cause = getattr(exc, "cause", None) or exc
            raise WorkerFailedError(
                f"rollout worker {runs.index(ref)} stopped: {type(cause).__name__}: {cause}"
            ) from exc
        raise WorkerFailedError(f"rollout worker {runs.index(ref)} returned before the stop")


class Budget:
    """The run's budget: wall-clock minutes and an optional update cap.

    Example:
        >>> b = Budget(minutes=1.0, max_updates=10, start_updates=4)
        >>> b.done(updates=14), 0.0 <= b.fraction(updates=7) < 1.0
        (True, True)
    """

    def __init__(self, minutes: float, max_updates: int | None, start_updates: int = 0) -> None:
        self.t0 = time.monotonic()
        self.seconds = minutes * 60.0
        self.max_updates = max_updates
        self.start_updates = start_updates

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def fraction(self, updates: int) -> float:
        """Share of the budget spent (the larger of time and updates)."""
        frac = self.elapsed() / self.seconds
        if self.max_updates:
            frac = max(frac, (updates - self.start_updates) / self.max_updates)
        return min(1.0, frac)

    def done(self, updates: int) -> bool:
        if self.max_updates is not None and updates - self.start_updates >= self.max_updates:
            return True
        return self.elapsed() >= self.seconds


def run_distrl(
    worker_cfg: TrainConfig,
    cfg: TrainConfig,
    run_dir: Path,
    state: dict[str, Any] | None,
    log: TextIO,
    interactive: bool,
) -> tuple[dict[str, int], dict[str, Any]]:
    """Run the asynchronous loop; ``worker_cfg`` is what workers build envs from (the embedded
    service's URL filled in), ``cfg`` what checkpoints record. Returns (counters, last row)."""
    import ray
    import torch
    from ray.util.queue import Queue
    from tqdm.auto import tqdm

    from evolve_envs.distrl.learner import Learner
    from evolve_envs.distrl.worker import WeightRegistry, policy_from_config, start_workers

    torch.manual_seed(cfg.run.seed)
    torch.set_num_threads(1)
    registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
    queue = Queue(maxsize=cfg.learner.queue_size, actor_options={"num_cpus": 0})
    workers: list[Any] = []
    tlog = TrainLog(run_dir, tensorboard=cfg.run.tensorboard)
    bar = None
    try:
        workers = start_workers(worker_cfg, registry, queue)
        spaces = ray.get(workers[0].ready.remote())
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        learner = Learner(policy, cfg.learner, spaces["action_space"], seed=cfg.run.seed)
        if state is not None:
            learner.load_state_dict(state)
        budget = Budget(cfg.run.minutes, cfg.run.max_updates, learner.updates)

        def publish() -> None:
            version, sd = learner.publish()
            registry.publish.remote(version, [ray.put(sd)])

        def checkpoint() -> None:
            save_checkpoint(
                run_dir, {**learner.state_dict(), "config": cfg.model_dump(), "algo": "distrl"}
            )

        publish()
        runs = [w.run.remote() for w in workers]
        stats = IntervalStats()
        last_log = last_ckpt = last_check = time.monotonic()
        ckpt_updates = learner.updates
        last: dict[str, Any] = {}
        bar = tqdm(total=round(budget.seconds), unit="s", desc="distrl", disable=not interactive)
        ratio = cfg.learner.max_sample_ratio
        while not budget.done(learner.updates):
            n = queue.qsize()
            if n:
                trajs = queue.get_nowait_batch(n)
                for t in trajs:
                    stats.trajectory(t, learner.version)
                learner.ingest(trajs)
            can_update = learner.ready() and (
                ratio is None or learner.samples < ratio * max(1, learner.trajectories_in)
            )
            if can_update:
                learner.update(budget.fraction(learner.updates))
                stats.updates += 1
                stats.samples += cfg.learner.batch_size
                if learner.updates % cfg.learner.publish_every == 0:
                    publish()
            else:
                time.sleep(0.02)
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                try:
                    _check_workers(runs)
                except WorkerFailedError:
                    checkpoint()
                    raise
            if now - last_log >= cfg.run.log_every_s:
                last = _row(learner, stats, queue, registry, budget, now - last_log)
                tlog.add(learner.updates, last)
                if interactive:
                    bar.n = min(bar.total, round(budget.elapsed()))
                    bar.set_postfix(updates=learner.updates, ret=last["return"])
                else:
                    print(format_row(last), file=log, flush=True)
                stats, last_log = IntervalStats(), now
            every = cfg.run.checkpoint_every_updates
            if now - last_ckpt >= cfg.run.checkpoint_every_s or (
                every and learner.updates - ckpt_updates >= every
            ):
                checkpoint()
                last_ckpt, ckpt_updates = now, learner.updates
        registry.stop.remote()
        ray.wait(runs, num_returns=len(runs), timeout=30)
        if stats.trajectories or stats.updates or not last:
            last = _row(learner, stats, queue, registry, budget, time.monotonic() - last_log)
            tlog.add(learner.updates, last)
            if not interactive:
                print(format_row(last), file=log, flush=True)
        checkpoint()
        return learner.counters(), last
    finally:
        if bar is not None:
            bar.close()
        tlog.close()
        for w in workers:
            ray.kill(w, no_restart=True)
        ray.kill(registry)
        queue.shutdown()


def _row(
    learner: Any,
    stats: IntervalStats,
    queue: Any,
    registry: Any,
    budget: Budget,
    elapsed: float,
) -> dict[str, Any]:
    import ray

    per_worker = ray.get(registry.workers.remote(), timeout=30)
    row: dict[str, Any] = {
        "time_s": round(budget.elapsed(), 2),
        "updates_total": learner.updates,
        "version": learner.version,
        **stats.row(elapsed),
        "queue_depth": queue.qsize(),
        "buffer_fill": len(learner.replay) / learner.cfg.capacity,
        "priority_spread": learner.priority_spread(),
        "trajectories_in": learner.trajectories_in,
        "env_steps_in": learner.env_steps_in,
        "dropped": sum(w.get("dropped", 0) for w in per_worker.values()),
        "worker_restarts": sum(max(0, w.get("incarnations", 1) - 1) for w in per_worker.values()),
    }
    row["retired"] = learner.replay.total_retired
    keys = (
        *("loss", "policy_loss", "value_loss", "entropy", "beta", "grad_norm", "approx_kl"),
        *("clip_frac", "sample_lag_mean", "sample_lag_max", "entropy_coef_now", "value_scale"),
    )
    for key in keys:
        if key in learner.last_stats:
            row[key] = learner.last_stats[key]
    return row
