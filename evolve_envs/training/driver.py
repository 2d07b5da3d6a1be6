"""``evolve-envs train``: DistRL (asynchronous) or GRPO (synchronous) on Ray.

:func:`run_train` reads the config once (typed, checked), claims the run directory, starts or
joins Ray, starts one embedded reward service for every worker, and runs the algorithm in the
shared loop until its budget is spent; the files it writes and ``--resume`` are described in
docs/training.md.

    evolve-envs train --algo distrl --config distrl/reach_place --minutes 2
    evolve-envs train --resume runs/train-distrl-20261122-220000 --minutes 5
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from evolve_envs.stack.reward_model import shared_service
from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.config import (
    TrainConfig,
    TrainSource,
    load_train_config,
    read_stored,
)
from evolve_envs.training.learner_task import resume_hint, run_loop_on_cluster
from evolve_envs.training.run_dir import claim_run_dir
from evolve_envs.training.runtime.head_watch import ClusterLostError, HeadWatch, gcs_address
from evolve_envs.training.runtime.placement import check_placeable, local_node

__all__ = [
    "TrainOptions",
    "name_reward_model",
    "TrainResult",
    "effective_config",
    "ray_session",
    "refuse_unplaceable",
    "reward_service_for",
    "run_dir_of",
    "run_train",
]


@dataclass
class TrainOptions:
    """What ``evolve-envs train`` was asked (the CLI's arguments).

    >>> cfg, state = effective_config(TrainOptions(["distrl/reach_place"], algo="grpo", minutes=2))
    >>> cfg.algo, cfg.run.minutes, state
    ('grpo', 2.0, None)
    >>> effective_config(TrainOptions())
    Traceback (most recent call last):
    ...
    ValueError: evolve-envs train: give --config (a YAML path or a shipped name)
    """

    config: Sequence[TrainSource] = ()
    algo: str | None = None
    address: str | None = None
    resume: str | Path | None = None
    run_dir: str | Path | None = None
    minutes: float | None = None
    overrides: Sequence[str] = ()
    progress_bar: bool = True
    log: TextIO | None = field(default=None, repr=False)  # a text stream for the per-interval lines
    overwrite: bool = False  # replace a run already in run_dir (else it is refused)
    claimed: bool = False  # the caller ran claim_run_dir already (the CLI, before train.log)
    trust_checkpoint: bool = False  # --resume may open an older checkpoint.pt's full pickle


@dataclass(frozen=True)
class TrainResult:
    """Where the run wrote and how far it got (``evaluation``: the held-out evaluations'
    summary, with ``eval`` on; ``degraded``: how many episodes got fallback rewards because
    reward-model calls failed, ``None`` for a clean run).

    >>> result = TrainResult(Path("runs/absent"), "grpo", {"env_steps": 64}, {}, wall_s=12.0)
    >>> result.checkpoint.as_posix(), result.policy.as_posix(), result.best, result.success
    ('runs/absent/checkpoint.pt', 'runs/absent/policy.safetensors', None, None)
    """

    run_dir: Path
    algo: str
    counters: dict[str, int]
    last_metrics: dict[str, object]
    wall_s: float
    evaluation: dict[str, object] | None = None
    degraded: dict[str, object] | None = None

    @property
    def success(self) -> float | None:
        """The final held-out success rate (mean action), ``None`` without ``eval``.

        >>> TrainResult(Path("r"), "grpo", {}, {}, 1.0, {"final": {"success": 0.5}}).success
        0.5
        """
        final = (self.evaluation or {}).get("final") or {}
        return None if final.get("success") is None else float(final["success"])

    @property
    def checkpoint(self) -> Path:
        """The run's last checkpoint (what ``--resume`` reads), ``run_dir/checkpoint.pt``."""
        return self.run_dir / "checkpoint.pt"

    @property
    def policy(self) -> Path:
        """The last checkpoint's policy file, ``run_dir/policy.safetensors``."""
        return self.run_dir / "policy.safetensors"

    @property
    def best(self) -> Path | None:
        """``run_dir/best.safetensors``, the best policy by held-out success, when the run
        wrote one."""
        path = self.run_dir / "best.safetensors"
        return path if path.is_file() else None


def effective_config(opts: TrainOptions) -> tuple[TrainConfig, dict[str, object] | None]:
    """The run's config, checked once (the ``--resume`` checkpoint's, then ``config``, the
    overrides, ``algo`` and ``minutes``), and the checkpoint's state (``None``: a new run).
    An older checkpoint that needs the full unpickler is opened only with
    ``opts.trust_checkpoint`` (:func:`~evolve_envs.training.checkpoint.load_pt`).
    """
    state = None
    sources: list[TrainSource] = []
    if opts.resume is not None:
        state = load_checkpoint(opts.resume, trust=opts.trust_checkpoint)
        sources.append(read_stored(state["config"]))
    sources.extend(opts.config)
    if not sources:
        raise ValueError("evolve-envs train: give --config (a YAML path or a shipped name)")
    overrides = list(opts.overrides)
    if opts.algo is not None:
        overrides.append(f"algo={opts.algo}")
    if opts.minutes is not None:
        overrides.append(f"run.minutes={opts.minutes}")
    cfg = load_train_config(*sources, overrides=overrides)
    from evolve_envs.training.algorithm import make_algorithm

    name = make_algorithm(cfg.algo).name  # an import path names its class; checkpoints the name
    if state is not None and state.get("algo", name) != name:
        raise ValueError(
            f"--resume {opts.resume}: the checkpoint is a {state.get('algo')} run, not {cfg.algo}"
        )
    return cfg, state


@contextlib.contextmanager
def ray_session(cfg: TrainConfig, address: str | None) -> Iterator[bool]:
    """Ray for the run: joins the cluster at ``address`` when given (``auto``, ``HOST:PORT``,
    ``ray://HOST:10001``; no local Ray is started), else uses a Ray already initialised here,
    else starts a local instance sized by ``cfg.ray``. Yields whether the run joined a cluster
    at ``address``. On leaving it disconnects what it connected and stops only a Ray it started
    (``ray.shutdown`` in a driver that joined a cluster leaves the cluster running)."""
    import ray

    connected = joined = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=True)
            joined = True
        else:
            ray.init(
                address="local",  # a new local Ray, never a cluster left running here
                num_cpus=cfg.ray.num_cpus,
                include_dashboard=cfg.ray.include_dashboard,
                object_store_memory=cfg.ray.object_store_mb * 1024**2,
                log_to_driver=True,
            )
        connected = True
    try:
        yield joined
    finally:
        if connected:
            ray.shutdown()


def _head_lost(address: str, run_dir: Path, seconds: float | None = None) -> str:
    silent = "does not answer" if seconds is None else f"has not answered for {seconds:g} s"
    return (
        f"lost the Ray cluster's head node (its GCS at {address} {silent}); "
        f"{resume_hint(run_dir)} on a new cluster"
    )


def _watch_head(cfg: TrainConfig, run_dir: Path, log: TextIO) -> HeadWatch | None:
    """A :class:`HeadWatch` on the joined cluster's GCS (None for a Ray Client connection)."""
    address = gcs_address()
    if address is None:
        return None
    message = "evolve-envs train: error: " + _head_lost(address, run_dir, cfg.run.head_timeout_s)
    return HeadWatch(address, timeout_s=cfg.run.head_timeout_s, message=message, stream=log)


@contextlib.contextmanager
def reward_service_for(cfg: TrainConfig) -> Iterator[TrainConfig]:
    """With ``reward_model.endpoint: embedded`` (and the reward model on), start one service
    here and yield a config whose workers use its URL; otherwise yield ``cfg`` unchanged."""
    envs = cfg.workers.num_workers * cfg.workers.num_envs
    with shared_service(cfg.reward_model, envs) as url:
        if url is None:
            yield cfg
        else:
            rm = cfg.reward_model.model_copy(update={"endpoint": url})
            yield cfg.model_copy(update={"reward_model": rm})


def name_reward_model(cfg: TrainConfig, log: TextIO) -> str | None:
    """Ask the run's reward service (given by URL, or the embedded one's) which model answers,
    say it on ``log`` (a stand-in says so) and return its id; ``None`` when the reward model is
    off, reached through Ray or did not say."""
    from evolve_envs.reward.clients.ray_handle_pool import is_ray_endpoint
    from evolve_envs.stack.reward_model import check_reward_service, endpoint_pool, reward_endpoints
    from evolve_envs.training.worker_env import NODE_IP

    rm = cfg.reward_model
    if not rm.enable or is_ray_endpoint(rm.endpoint) or NODE_IP in str(rm.endpoint):
        return None
    pool = endpoint_pool(rm, reward_endpoints(rm))
    try:
        caps = check_reward_service(rm, pool)
    except Exception:  # noqa: BLE001 - the workers' own check says what is wrong
        return None
    finally:
        pool.close()
    if caps is None:
        return None
    model = caps.model_id or caps.backend
    note = (
        " (the mock backend's rule: a stand-in, not a learned model)"
        if caps.backend == "mock"
        else ""
    )
    where = rm.endpoint if isinstance(rm.endpoint, str) else ", ".join(rm.endpoint)
    print(f"reward model {model}{note} at {where}", file=log, flush=True)
    return model


def refuse_unplaceable(cfg: TrainConfig, address: str | None) -> None:
    """Before anything starts: when the run will start its own local Ray (no ``address``, no
    Ray initialised here), raise :class:`~evolve_envs.training.runtime.placement.PlacementError` if
    that Ray cannot hold a rollout worker or the learner (``learner.num_gpus=1`` on a machine
    without a GPU, a custom resource no local Ray has). A cluster is checked once joined."""
    if address:
        return
    import ray

    if ray.is_initialized():
        return  # the Ray running here is checked as it is
    node = local_node(cfg)
    if node is not None:
        check_placeable(cfg, [node], where="the local Ray this run starts (no --address)")


def run_dir_of(opts: TrainOptions, cfg: TrainConfig) -> Path:
    """Where the run writes: the ``--resume`` folder, else ``run_dir``, else a new
    ``runs/train-ALGO-DATE-TIME``."""
    if opts.resume is not None:
        return Path(opts.resume)
    if opts.run_dir is not None:
        return Path(opts.run_dir)
    return Path(f"runs/train-{cfg.algo}-{time.strftime('%Y%m%d-%H%M%S')}")


def run_train(
    opts: TrainOptions, checked: tuple[TrainConfig, dict[str, object] | None] | None = None
) -> TrainResult:
    """Run one training job; ``checked``: what :func:`effective_config` returned, if known."""
    cfg, state = checked if checked is not None else effective_config(opts)
    refuse_unplaceable(cfg, opts.address)  # nothing written, nothing started
    run_dir = run_dir_of(opts, cfg)
    if not opts.claimed:
        claim_run_dir(run_dir, resume=opts.resume is not None, overwrite=opts.overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.stored(), sort_keys=False))
    log = opts.log if opts.log is not None else sys.stderr
    interactive = opts.progress_bar and hasattr(log, "isatty") and log.isatty()
    t0 = time.monotonic()
    from evolve_envs.training.algorithm import make_algorithm
    from evolve_envs.training.loop import run_loop

    with ray_session(cfg, opts.address) as joined:
        check_placeable(cfg)  # before the reward service starts and anything waits
        with reward_service_for(cfg) as worker_cfg:
            model_id = name_reward_model(worker_cfg, log)
            watch = _watch_head(cfg, run_dir, log) if joined else None
            if watch is not None:
                watch.start()
            try:
                if cfg.learner.placement == "cluster":
                    counters, last = run_loop_on_cluster(worker_cfg, cfg, run_dir, state, log)
                else:
                    algo = make_algorithm(cfg.algo)
                    counters, last = run_loop(
                        algo, worker_cfg, cfg, run_dir, state, log, interactive
                    )
            except Exception as exc:
                if watch is not None and not watch.reachable():  # the head went: say that
                    lost = _head_lost(f"{watch.host}:{watch.port}", run_dir)
                    raise ClusterLostError(lost) from exc
                raise
            finally:
                if watch is not None:
                    watch.stop()
    wall = time.monotonic() - t0
    evaluation = last.pop("eval", None)
    degraded = last.pop("degraded", None)
    result = TrainResult(run_dir, cfg.algo, counters, last, wall, evaluation, degraded)
    summary: dict[str, object] = {
        "algo": cfg.algo,
        "wall_s": round(wall, 2),
        "counters": counters,
        "last": last,
    }
    if evaluation is not None:
        summary["eval"] = evaluation
    summary["reward_model_id"] = model_id
    summary["degraded"] = degraded  # null: every reward came from the model
    placement = run_dir / "placement.json"
    if placement.is_file():
        summary["placement"] = json.loads(placement.read_text())
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return result
