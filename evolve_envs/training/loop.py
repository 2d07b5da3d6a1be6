"""The one training loop every algorithm runs in: budget, logging, checkpoints, worker health.

:func:`run_loop` owns everything around an :class:`~evolve_envs.training.algorithm.Algorithm`: the
weight registry, trajectory queue and restartable workers (killed at the end whatever happens),
the budget (``run.minutes``, ``max_updates``, ``max_env_steps``), atomic checkpoints (the resume
state in ``checkpoint.pt``, the policy in ``policy.safetensors``), worker health checks, metrics
rows, policy snapshots and the held-out evaluation (docs/DISTRL.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from evolve_envs.training.algorithm import (
    Algorithm,
    Budget,
    TrainContext,
    WorkerFailedError,
    check_worker_calls,
)
from evolve_envs.training.checkpoint import plain_data, save_checkpoint
from evolve_envs.training.common.finite import NonFiniteError, nonfinite_tensors
from evolve_envs.training.common.subnormal import flush_subnormals
from evolve_envs.training.config import TrainConfig
from evolve_envs.training.fallback_watch import FallbackWatch
from evolve_envs.training.periodic_eval import PeriodicEval
from evolve_envs.training.policy_file import LAST_POLICY, load_initial_weights, save_policy_file
from evolve_envs.training.run_log import IntervalStats, TrainLog, format_row
from evolve_envs.training.runtime.placement import PlacementError, on_this_node

if TYPE_CHECKING:
    import torch
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

    from evolve_envs.training.policies.base import Policy

__all__ = [
    "learner_device",
    "public_config",
    "reserve_learner_gpus",
    "resumed_worker_config",
    "run_loop",
]


def reserve_learner_gpus(cfg: TrainConfig, timeout_s: float = 60.0) -> PlacementGroup | None:
    """A Ray placement group holding ``learner.num_gpus`` GPUs for the learner (the driver
    process, which Ray does not schedule), so that workers asking for GPUs leave its share free;
    None when ``num_gpus`` is 0. Remove it with ``ray.util.remove_placement_group``."""
    import ray
    from ray.util.placement_group import placement_group

    if cfg.learner.num_gpus <= 0 or cfg.learner.placement == "cluster":
        return None  # with placement: cluster the learner's own task holds its GPUs
    pg = placement_group([{"GPU": float(cfg.learner.num_gpus)}], name="distrl-learner")
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:  # the GPUs exist (check_placeable saw them) but others hold them
        ray.util.remove_placement_group(pg)
        raise PlacementError(
            f"learner.num_gpus={cfg.learner.num_gpus:g}: no GPU share came free within "
            f"{timeout_s:g} s (the Ray cluster has {ray.cluster_resources().get('GPU', 0):g} "
            f"GPUs, {ray.available_resources().get('GPU', 0):g} free); stop what holds them or "
            "lower learner.num_gpus"
        )
    return pg


def learner_device(cfg: TrainConfig) -> torch.device:
    """The learner's torch device: CUDA when ``learner.num_gpus > 0`` and a GPU is visible."""
    import torch

    if cfg.learner.num_gpus > 0 and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def public_config(cfg: TrainConfig) -> dict[str, object]:
    """The config as a tracker may see it: the reward service's token hidden.

    Example:
        >>> cfg = TrainConfig(reward_model={"enable": True, "token": "s3cret"})
        >>> public_config(cfg)["reward_model"]["token"]
        '**********'
    """
    data = cfg.stored()
    if cfg.reward_model.token is not None:
        data["reward_model"] = {**data["reward_model"], "token": "**********"}
    return data


def resumed_worker_config(worker_cfg: TrainConfig, updates: int) -> TrainConfig:
    """The workers' config for a run resumed at ``updates``: their seed mixes in ``updates``, so
    the resumed workers draw new reset seeds instead of replaying the first run's scenes (the
    learner and the checkpoint keep ``run.seed``).

    Example:
        >>> from evolve_envs.training.config import load_train_config
        >>> cfg = load_train_config({"run": {"seed": 3}})
        >>> a, b = (resumed_worker_config(cfg, n).run.seed for n in (100, 200))
        >>> a != b and 3 not in (a, b), resumed_worker_config(cfg, 100).run.seed == a
        (True, True)
    """
    import numpy as np

    seed = int(np.random.SeedSequence([worker_cfg.run.seed, updates]).generate_state(1)[0])
    run = worker_cfg.run.model_copy(update={"seed": seed})
    return worker_cfg.model_copy(update={"run": run})


@flush_subnormals()  # subnormal floats flushed to zero for the whole loop (common/subnormal.py)
def run_loop(
    algo: Algorithm,
    worker_cfg: TrainConfig,
    cfg: TrainConfig,
    run_dir: Path,
    state: dict[str, object] | None,
    log: TextIO,
    interactive: bool,
) -> tuple[dict[str, int], dict[str, object]]:
    """Run ``algo`` until the budget is spent; ``worker_cfg`` is what workers build envs from
    (the embedded service's URL filled in), ``cfg`` what checkpoints record. Returns (counters,
    last metrics row)."""
    import ray
    import torch
    from ray.util.queue import Queue
    from tqdm.auto import tqdm

    from evolve_envs.training.runtime.weight_registry import WeightRegistry
    from evolve_envs.training.worker_env import policy_from_config
    from evolve_envs.training.worker_start import start_workers

    torch.manual_seed(cfg.run.seed)
    torch.set_num_threads(1)
    if state is not None:
        worker_cfg = resumed_worker_config(worker_cfg, int(state["counters"]["updates"]))
    # the registry and the queue live on the learner's node: losing another node never loses them
    here = on_this_node()
    registry = ray.remote(WeightRegistry).options(num_cpus=0, scheduling_strategy=here).remote()
    queue = Queue(
        maxsize=cfg.learner.queue_size,
        actor_options={"num_cpus": 0, "scheduling_strategy": here},
    )
    workers: list[ActorHandle] = []
    tlog = TrainLog(
        run_dir,
        tensorboard=cfg.run.tensorboard,
        wandb_project=cfg.run.wandb_project,
        run_config=public_config(cfg),
    )
    evals = PeriodicEval(cfg, run_dir, tlog, log)
    bar = None
    learner_pg = None
    try:
        learner_pg = reserve_learner_gpus(cfg)
        workers = start_workers(worker_cfg, registry, queue)
        spaces = ray.get(workers[0].ready.remote())
        device = learner_device(cfg)
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        if cfg.policy.init_from is not None and state is None:
            load_initial_weights(policy, cfg.policy.init_from, spaces)
        policy.to(device)
        algo.setup(TrainContext(cfg, workers, registry, queue, policy, spaces, device))
        if state is not None:
            algo.load_state_dict(state)

        def checkpoint() -> None:
            payload = {**algo.state_dict(), "config": cfg.stored(), "algo": algo.name}
            bad = nonfinite_tensors(payload.get("policy", {}))
            if bad:  # keep the last good checkpoint for --resume
                raise NonFiniteError(
                    f"not writing a checkpoint: the policy's weights hold NaN or inf "
                    f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); the last "
                    f"checkpoint in {run_dir} is kept"
                )
            save_checkpoint(run_dir, payload)
            info = {
                "config": payload["config"],
                "algo": algo.name,
                "counters": {k: int(v) for k, v in algo.counters().items()},
            }
            save_policy_file(
                run_dir / LAST_POLICY,
                policy.state_dict(),
                info,
                spaces["observation_space"],
                spaces["action_space"],
            )

        def updates() -> int:
            return int(algo.counters()["updates"])

        def env_steps() -> int:
            return int(algo.counters().get("env_steps_in", 0))

        budget = Budget(
            cfg.run.minutes, cfg.run.max_updates, updates(), cfg.run.max_env_steps, env_steps()
        )
        snapshots = _Snapshots(run_dir, cfg.run.snapshot_every_s, policy, budget)
        algo.start()
        stats = IntervalStats()
        fallbacks = FallbackWatch(log)
        last_log = last_ckpt = last_check = time.monotonic()
        ckpt_updates = updates()
        last: dict[str, object] = {}
        bar = tqdm(
            total=round(budget.seconds),
            unit="s",
            desc=algo.name,
            disable=not interactive,
            file=log,
        )

        placement = _Placement(run_dir, registry, str(device))
        placement.write()

        def write_row(now: float) -> dict[str, object]:
            row = _row(algo, stats, registry, budget, now - last_log, cfg.workers.num_envs)
            row.update(evals.columns())
            tlog.add(updates(), row)
            placement.write()
            if interactive:
                bar.n = min(bar.total, round(budget.elapsed()))
                shown = {"updates": updates(), "ret": row["return"]}
                if row["fallbacks"]:
                    shown["FALLBACK"] = f"{row['fallback_share']:.0%}"
                bar.set_postfix(shown)
            else:
                print(format_row(row), file=log, flush=True)
            fallbacks.interval(row, stats.fallback_reason())
            return row

        snapshots.maybe(algo.counters())
        while not budget.done(updates(), env_steps()):
            try:
                trajs = algo.collect()
            except WorkerFailedError:
                checkpoint()
                raise
            version = int(algo.counters()["version"])
            for t in trajs:
                stats.trajectory(t, version)
            try:
                res = algo.update(trajs, budget.fraction(updates(), env_steps()))
            except NonFiniteError:  # skipped steps left the last finite weights: keep them
                checkpoint()
                raise
            stats.updates += res.updates
            stats.samples += res.samples
            if not res.updates and not trajs:
                time.sleep(0.02)
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                try:
                    check_worker_calls(algo.running_calls())
                except WorkerFailedError:
                    checkpoint()
                    raise
            snapshots.maybe(algo.counters())
            evals.maybe(policy, algo.counters(), budget.elapsed())
            if now - last_log >= cfg.run.log_every_s:
                last = write_row(now)
                stats, last_log = IntervalStats(), now
            every = cfg.run.checkpoint_every_updates
            if now - last_ckpt >= cfg.run.checkpoint_every_s or (
                every and updates() - ckpt_updates >= every
            ):
                checkpoint()
                last_ckpt, ckpt_updates = now, updates()
        algo.stop()
        evals.final(policy, algo.counters(), budget.elapsed())
        if stats.trajectories or stats.updates or not last:
            last = write_row(time.monotonic())
        placement.write()
        snapshots.maybe(algo.counters(), force=True)
        checkpoint()
        evaluation = evals.summary()
        if evaluation is not None:
            last = {**last, "eval": evaluation}
        if fallbacks.degraded:
            last = {**last, "degraded": fallbacks.summary()}
        return algo.counters(), last
    finally:
        if bar is not None:
            bar.close()
        evals.close()
        tlog.close()
        for w in workers:
            ray.kill(w, no_restart=True)
        ray.kill(registry)
        queue.shutdown()
        if learner_pg is not None:
            ray.util.remove_placement_group(learner_pg)


class _Placement:
    """``placement.json`` in the run directory: the learner's node and device, and for every
    worker the node (and reward transport) of each incarnation; rewritten with every metrics
    row, so a restart on another node shows while the run goes on."""

    def __init__(self, run_dir: Path, registry: ActorHandle, device: str) -> None:
        import ray

        self.path = run_dir / "placement.json"
        self.registry = registry
        self.learner = {"node_id": ray.get_runtime_context().get_node_id(), "device": device}

    def write(self) -> None:
        import json

        import ray

        workers = ray.get(self.registry.placements.remote(), timeout=30)
        data = {"learner": self.learner, "workers": {str(k): v for k, v in workers.items()}}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.path)


class _Snapshots:
    """Policy weights every ``every_s`` seconds under ``run_dir/snapshots/`` (None: off)."""

    def __init__(
        self, run_dir: Path, every_s: float | None, policy: Policy, budget: Budget
    ) -> None:
        self.dir = run_dir / "snapshots"
        self.every_s = every_s
        self.policy = policy
        self.budget = budget
        self.next_s = 0.0

    def maybe(self, counters: dict[str, int], force: bool = False) -> None:
        import torch

        if self.every_s is None:
            return
        t = self.budget.elapsed()
        if not force and t < self.next_s:
            return
        self.next_s = t + self.every_s
        self.dir.mkdir(parents=True, exist_ok=True)
        sd = {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}
        payload = {"policy": sd, "time_s": float(t), "counters": plain_data(dict(counters))}
        torch.save(payload, self.dir / f"{int(counters['updates']):08d}-{t:08.1f}.pt")


#: Metrics columns summed over the workers' counters (:data:`~evolve_envs.training.settling.
#: SETTLING_COUNTS` and the env steps they played).
SETTLEMENT_COLUMNS = {
    "worker_env_steps": "env_steps",
    "settled_episodes": "settled",
    "cut_steps": "cut_steps",
    "unsettled_episodes": "unsettled",
    "saturation_waits": "saturation_waits",
}


def _row(
    algo: Algorithm,
    stats: IntervalStats,
    registry: ActorHandle,
    budget: Budget,
    elapsed: float,
    num_envs: int,
) -> dict[str, object]:
    import ray

    per_worker = ray.get(registry.workers.remote(), timeout=30)
    counters = algo.counters()
    row: dict[str, object] = {
        "time_s": round(budget.elapsed(), 2),
        "updates_total": counters["updates"],
        "version": counters["version"],
        **stats.row(elapsed),
        "dropped": sum(w.get("dropped", 0) for w in per_worker.values()),
        "worker_restarts": sum(max(0, w.get("incarnations", 1) - 1) for w in per_worker.values()),
    }
    # every env of a worker always has an episode under way: a restart loses one per env (the
    # trajectory queue takes whole trajectories only, so none of them reaches the learner)
    row["lost_episodes"] = row["worker_restarts"] * num_envs
    # distrl.barrier: pauses the workers sat out while the learner trained, and their seconds
    row["worker_pauses"] = sum(int(w.get("pauses", 0)) for w in per_worker.values())
    row["paused_s"] = sum(int(w.get("paused_ms", 0)) for w in per_worker.values()) / 1000
    # settled episodes (calls: deferred): handed on, steps cut after a model-judged done, ended
    # ones whose answers are not all in yet, resets that waited for a saturated reward service
    # (0 with the other call modes)
    for column, key in SETTLEMENT_COLUMNS.items():
        row[column] = sum(int(w.get(key, 0)) for w in per_worker.values())
    row.update(algo.metrics())
    row.setdefault("queue_depth", 0)
    row.setdefault("buffer_fill", float("nan"))
    return row
