"""``evolve-envs train``: DistRL or GRPO on Ray, every check before anything starts, and the exit
status of the run (docs/getting-started.md, "Exit statuses").

Usage (shell)::

    evolve-envs train --config reach_place --minutes 2 --run-dir runs/rp
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from evolve_envs.cli.errors import CliError, ExitStatus, library_output_to, one_line

if TYPE_CHECKING:
    from evolve_envs.training.config import TrainConfig
    from evolve_envs.training.driver import TrainResult

__all__ = ["add_train", "run_train_command"]


def add_train(sub: argparse._SubParsersAction) -> None:
    """The ``train`` subcommand's arguments."""
    tr = sub.add_parser("train", help="train a policy with DistRL or GRPO on Ray")
    tr.add_argument("--algo", choices=("distrl", "grpo"), default=None)
    tr.add_argument(
        "--config",
        action="append",
        default=[],
        help="YAML path or shipped name (reach_place, reach_place_tuned, libero_10, ...)",
    )
    tr.add_argument("--address", default=None, help="Ray cluster address (default: local)")
    tr.add_argument("--resume", default=None, metavar="DIR", help="continue the run in DIR")
    tr.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="--resume may open an older checkpoint.pt that needs Python's full unpickler, "
        "which runs any code its author put in it: only a run you trust (docs/security.md)",
    )
    tr.add_argument("--run-dir", default=None, metavar="DIR")
    tr.add_argument(
        "--overwrite",
        action="store_true",
        help="--run-dir holds a run: delete its files and start a new one there",
    )
    tr.add_argument("--minutes", type=float, default=None, help="wall-clock budget")
    tr.add_argument("--no-progress-bar", action="store_true")
    tr.add_argument(
        "--wandb",
        default=None,
        metavar="PROJECT",
        help="also log to this W&B project: metrics, held-out evaluations, their videos "
        "(run.wandb_project)",
    )
    tr.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="e.g. distrl.lr=1e-3, eval.every_s=60 (held-out evaluation and best.safetensors)",
    )


def run_train_command(args: argparse.Namespace) -> int:
    """Run ``evolve-envs train``; returns its exit status."""
    from evolve_envs.training.algorithm import RewardModelFailedError, WorkerFailedError
    from evolve_envs.training.common.finite import NonFiniteError
    from evolve_envs.training.driver import (
        TrainOptions,
        effective_config,
        refuse_unplaceable,
        run_dir_of,
        run_train,
    )
    from evolve_envs.training.learner_task import LearnerLostError
    from evolve_envs.training.run_dir import claim_run_dir
    from evolve_envs.training.runtime.head_watch import ClusterLostError
    from evolve_envs.training.runtime.placement import PlacementError
    from evolve_envs.training.worker_start import WorkerStartError

    overrides = list(args.overrides)
    if args.wandb:
        overrides.append(f"run.wandb_project={args.wandb}")
    opts = TrainOptions(
        config=args.config,
        algo=args.algo,
        address=args.address,
        resume=args.resume,
        run_dir=args.run_dir,
        minutes=args.minutes,
        overrides=overrides,
        progress_bar=not args.no_progress_bar,
        overwrite=args.overwrite,
        trust_checkpoint=args.trust_checkpoint,
    )
    if args.trust_checkpoint and args.resume is None:
        raise CliError("--trust-checkpoint opens the checkpoint of --resume DIR: give --resume")
    if args.resume is not None and args.overwrite:
        raise CliError(
            "--resume continues the run in its folder; --overwrite replaces it: not both"
        )
    cfg, state = effective_config(opts)  # a bad config or key: one line, nothing written
    if cfg.run.wandb_project:  # W&B missing: one line now, not after the workers started
        from evolve_envs.recording.metrics_log import import_wandb

        import_wandb(cfg.run.wandb_project)
    try:  # a GPU or resource the local Ray will not have: one line, before Ray starts
        refuse_unplaceable(cfg, opts.address)
    except PlacementError as exc:
        raise CliError(str(exc), ExitStatus.USAGE) from exc
    _check_train_service(cfg)  # a dead or foreign reward service: one line, nothing written
    run_dir = run_dir_of(opts, cfg)
    # a folder holding another run: one line, nothing touched (--overwrite clears it here)
    claim_run_dir(run_dir, resume=opts.resume is not None, overwrite=opts.overwrite)
    opts.claimed = True
    if opts.resume is None:
        opts.run_dir = run_dir
    log_path = run_dir / "train.log"
    import ray  # noqa: F401  (its log handler holds this process's stderr: train.log below)

    resume = f"evolve-envs train --resume {run_dir} continues it"
    try:
        # Ray's and the libraries' own output goes to train.log; the user sees the run's lines
        with (
            library_output_to(log_path) as user,
            open(log_path, "a", buffering=1, encoding="utf-8") as lib_log,
            contextlib.redirect_stderr(lib_log),  # Ray's forwarded worker logs, too
        ):
            opts.log = user
            res = run_train(opts, (cfg, state))  # the config read once
    except WorkerStartError as exc:
        raise CliError(f"{exc} (details in {log_path})", ExitStatus.ERROR) from exc
    except PlacementError as exc:
        raise CliError(str(exc), ExitStatus.USAGE) from exc
    except (ClusterLostError, LearnerLostError) as exc:
        raise CliError(str(exc), ExitStatus.ERROR) from exc
    except NonFiniteError as exc:
        raise CliError(f"{exc} (details in {log_path})", ExitStatus.ERROR) from exc
    except RewardModelFailedError as exc:
        raise CliError(
            f"the reward service failed mid-run (strict mode): {exc}; checkpoint written: "
            f"restart the service, then {resume} (details in {log_path})",
            ExitStatus.SERVICE,
        ) from exc
    except WorkerFailedError as exc:
        raise CliError(
            f"{exc} (checkpoint written; fix the cause, then --resume the run directory; "
            f"details in {log_path})",
            ExitStatus.ERROR,
        ) from exc
    _closing_lines(res)
    if res.degraded:
        d = res.degraded
        print(
            f"degraded: {d['episodes']} of {d['of_episodes']} episode(s) got fallback rewards "
            f"({d['steps']} step(s)) because reward-model calls failed"
            + (f": {one_line(d['reason'])}" if d.get("reason") else "")
            + f"; their return and progress are not the model's (summary.json: degraded; {resume} "
            "once the service is back)",
            file=sys.stderr,
        )
        return ExitStatus.DEGRADED
    return ExitStatus.OK


def _closing_lines(res: TrainResult) -> None:
    """What this run wrote (a claimed folder holds only this run's files) and its best policy."""
    names = ("config.yaml", "metrics.csv", "eval.csv", "checkpoint.pt", "policy.safetensors")
    names += ("best.safetensors",)
    names += ("summary.json", "placement.json", "train.log", "eval_videos", "snapshots")
    written = [n for n in names if (res.run_dir / n).exists()]
    print(
        f"wrote {res.run_dir}: {', '.join(written)} "
        f"({res.counters.get('updates', 0)} updates, {res.wall_s:.0f} s)"
    )
    best = (res.evaluation or {}).get("best")
    if best:
        print(
            f"best held-out success {best['success']:.2f} (mean action, env success flag, "
            f"{best['episodes']} unseen scenes) at update {best['updates']}: "
            f"{res.run_dir / 'best.safetensors'}"
        )


def _check_train_service(cfg: TrainConfig) -> None:
    """Ask a reward service given by URL for its capabilities before the run starts (an
    embedded one is started by the run; a Ray Serve app is reached from the workers)."""
    from evolve_envs.reward.clients.ray_handle_pool import is_ray_endpoint
    from evolve_envs.stack.reward_model import check_reward_service, endpoint_pool, reward_endpoints
    from evolve_envs.training.worker_env import NODE_IP

    rm = cfg.reward_model
    if not rm.enable or rm.embedded or is_ray_endpoint(rm.endpoint) or NODE_IP in str(rm.endpoint):
        return  # an embedded one starts with the run; workers check a Serve app or node proxy
    pool = endpoint_pool(rm, reward_endpoints(rm))
    try:
        check_reward_service(rm, pool)
    finally:
        pool.close()
