"""``evolve-envs``: the command-line entry point.

Subcommands:

* ``rollout`` — roll out episodes through the full wrapper stack and write a report
  (``summary.json``, ``progress_<ep>.png``, ``episode_<ep>.mp4``); see :mod:`evolve_envs.rollout`.
* ``tasks`` — list a suite's task ids, names and instructions.

Example::

    evolve-envs rollout --config configs/libero_10.yaml --task-id 0 --episodes 1 --out runs/demo
    evolve-envs tasks libero_goal
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evolve-envs", description="LIBERO environments with reward-model shaping."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ro = sub.add_parser("rollout", help="roll out episodes through the wrapper stack")
    ro.add_argument(
        "--config",
        action="append",
        default=None,
        help="YAML config; repeat to layer a preset on a suite config "
        "(default: configs/libero_10.yaml)",
    )
    ro.add_argument("--task-id", type=int, default=None, help="task index in the suite")
    ro.add_argument("--episodes", type=int, default=1)
    ro.add_argument("--num-envs", type=int, default=1, help="parallel envs (subprocesses if > 1)")
    ro.add_argument("--policy", choices=("random", "zero"), default="random")
    ro.add_argument("--out", default=None, help="output folder (default: runs/<suite>-<time>)")
    ro.add_argument("--seed", type=int, default=0)
    ro.add_argument("--max-steps", type=int, default=None, help="override the episode limit")
    ro.add_argument("--no-video", action="store_true", help="skip the MP4s")
    ro.add_argument("--no-progress-bar", action="store_true")

    ts = sub.add_parser("tasks", help="list the tasks of a LIBERO suite")
    ts.add_argument("suite", help="libero_10 | libero_spatial | libero_object | libero_goal | ...")
    return parser


def _rollout(args: argparse.Namespace) -> int:
    import time

    from evolve_envs.rollout import RolloutOptions, run_rollout

    configs = args.config or ["configs/libero_10.yaml"]
    out = args.out or f"runs/rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run_rollout(
        RolloutOptions(
            config=configs,
            task_id=args.task_id,
            episodes=args.episodes,
            num_envs=args.num_envs,
            policy=args.policy,
            out=out,
            seed=args.seed,
            max_steps=args.max_steps,
            video=not args.no_video,
            progress_bar=not args.no_progress_bar,
        )
    )
    print()
    print(report.table)
    print(f"\nwrote {report.out}/summary.json and per-episode plots/videos ({report.wall_s:.0f} s)")
    return 0


def _tasks(args: argparse.Namespace) -> int:
    from evolve_envs.libero import LiberoEnv

    env = LiberoEnv(args.suite, task_id=0)
    bench = env._benchmark
    for i, name in enumerate(bench.get_task_names()):
        print(f"{i:3d}  {bench.get_task(i).language}\n     {name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "rollout":
            return _rollout(args)
        return _tasks(args)
    except (ValueError, FileNotFoundError) as exc:  # config and input errors: no traceback
        print(f"evolve-envs {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
