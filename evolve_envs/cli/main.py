"""``evolve-envs``: the command-line entry point; one parser builder and one runner per
subcommand (rollout, tasks, train, evaluate, demo, demos, clone, calibrate, export,
fit-reward, relabel), the longer ones in modules of their own. The commands are described in
docs/getting-started.md.

Usage (shell)::

    evolve-envs rollout --config libero_10 --task-id 0 --episodes 1 --out runs/demo
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from evolve_envs.cli import clone, demos, export, fit_reward, relabel
from evolve_envs.cli.demo import add_demo, run_demo
from evolve_envs.cli.errors import (
    CliError,
    ExitStatus,
    configure_cli_logging,
    describe_failure,
    one_line,
    run_command,
)
from evolve_envs.cli.evaluate import add_evaluate, run_evaluate
from evolve_envs.cli.train import add_train, run_train_command

DEFAULT_CONFIG = "libero_10"


def _task_id(text: str) -> int | str:
    """``--task-id``: an index (digits) or a task name / instruction."""
    return int(text) if re.fullmatch(r"\s*-?\d+\s*", text) else text


def _add_rollout(sub: argparse._SubParsersAction) -> None:
    ro = sub.add_parser("rollout", help="roll out episodes through the wrapper stack")
    ro.add_argument(
        "--config",
        action="append",
        default=None,
        help="YAML path or shipped config name (libero_10, fast_dev, ...); repeat to layer a "
        f"preset on a suite config (default: {DEFAULT_CONFIG})",
    )
    ro.add_argument(
        "--task-id",
        type=_task_id,
        default=None,
        help="task index, task name or instruction in the suite (see `evolve-envs tasks`)",
    )
    ro.add_argument("--episodes", type=int, default=1)
    ro.add_argument("--num-envs", type=int, default=1, help="parallel envs (subprocesses if > 1)")
    ro.add_argument(
        "--policy",
        default="random",
        help="random | zero | module:function (one env's observation -> its action)",
    )
    ro.add_argument("--out", default=None, help="output folder (default: runs/rollout-<time>)")
    ro.add_argument("--seed", type=int, default=0)
    ro.add_argument("--max-steps", type=int, default=None, help="override the episode limit")
    ro.add_argument("--no-video", action="store_true", help="skip the MP4s")
    ro.add_argument(
        "--video-every", type=int, default=1, metavar="N", help="an MP4 for every N-th episode"
    )
    ro.add_argument("--no-progress-bar", action="store_true")
    ro.add_argument(
        "--no-tensorboard", action="store_true", help="no TensorBoard events (CSV only)"
    )
    ro.add_argument("--wandb", default=None, metavar="PROJECT", help="also log to this W&B project")
    ro.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="also record every episode (frames, actions, model progress) for re-scoring",
    )
    ro.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config keys set last, e.g. reward_model.call_every=3 (as `train` takes them)",
    )


def _rollout(args: argparse.Namespace) -> int:
    import time

    from evolve_envs.cli.rollout import RolloutOptions, run_rollout
    from evolve_envs.reward.clients.errors import RewardServiceError

    out = Path(args.out or f"runs/rollout-{time.strftime('%Y%m%d-%H%M%S')}")
    opts = RolloutOptions(
        config=args.config or [DEFAULT_CONFIG],
        task_id=args.task_id,
        episodes=args.episodes,
        num_envs=args.num_envs,
        policy=args.policy,
        out=out,
        seed=args.seed,
        max_steps=args.max_steps,
        video=not args.no_video,
        video_every=args.video_every,
        progress_bar=not args.no_progress_bar,
        tensorboard=not args.no_tensorboard,
        wandb_project=args.wandb,
        record=args.record,
        overrides=list(args.overrides),
    )
    try:
        report = run_rollout(opts)
    except KeyboardInterrupt:
        kept = _finished_episodes(out)
        print(
            f"\nevolve-envs rollout: interrupted; {kept} finished episode(s) kept in {out}",
            file=sys.stderr,
        )
        return ExitStatus.INTERRUPTED
    except RewardServiceError as exc:
        if _stop_reason(out) != "reward_service_failed":  # failed at start: nothing written
            raise
        kept = _finished_episodes(out)
        raise CliError(
            f"{describe_failure(exc)[1]} ({kept} finished episode(s) kept in {out}, "
            "summary.json says stop_reason: reward_service_failed)",
            ExitStatus.SERVICE,
        ) from exc
    print()
    print(report.table)
    print(
        f"\nwrote {report.out}: {', '.join(_written(report.out, report.episodes))} "
        f"({report.wall_s:.0f} s)"
    )
    if report.degraded:
        d = report.degraded
        print(
            f"degraded: {d['episodes']} of {d['of_episodes']} episode(s) got fallback rewards "
            f"({d['fallback_steps']} step(s), {d['reward_model_errors']} failed reward-model "
            f"call(s)) because the reward service failed: {one_line(d['reason'])}",
            file=sys.stderr,
        )
        return ExitStatus.DEGRADED
    return ExitStatus.OK


def _written(out: Path, episodes: list[dict]) -> list[str]:
    """What the rollout actually wrote, for the closing line."""
    parts = ["summary.json"]
    if (out / "metrics.csv").exists():
        parts.append("metrics.csv")
    if (out / "tensorboard").is_dir():
        parts.append("tensorboard/")
    plots = sum(1 for e in episodes if e.get("plot"))
    videos = sum(1 for e in episodes if e.get("video"))
    parts.append(f"{plots} plot{'s' * (plots != 1)}")
    if videos:
        parts.append(f"{videos} video{'s' * (videos != 1)}")
    return parts


def _stop_reason(out: Path) -> str | None:
    """The ``stop_reason`` of the ``summary.json`` in ``out`` (None: none there)."""
    try:
        return json.loads((out / "summary.json").read_text()).get("stop_reason")
    except (OSError, ValueError, AttributeError):
        return None


def _finished_episodes(out: Path) -> int:
    try:
        return len(json.loads((out / "summary.json").read_text())["episodes"])
    except (OSError, ValueError, KeyError):
        return 0


def _add_tasks(sub: argparse._SubParsersAction) -> None:
    ts = sub.add_parser("tasks", help="list the tasks of a LIBERO suite")
    ts.add_argument("suite", help="libero_10 | libero_spatial | libero_object | libero_goal | ...")


def _tasks(args: argparse.Namespace) -> int:
    from evolve_envs.envs.libero import LiberoEnv

    env = LiberoEnv(args.suite, task_id=0)
    bench = env._benchmark
    for i, name in enumerate(bench.get_task_names()):
        print(f"{i:3d}  {bench.get_task(i).language}\n     {name}")
    return 0


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    ca = sub.add_parser("calibrate", help="how right is a reward model on recorded episodes?")
    ca.add_argument(
        "recordings",
        nargs="*",
        help="recording folders (rollout --record DIR), LeRobotDataset v3 folders, or 'shipped' "
        "for the package's ReachPlace controls (4 successes, 6 failures; a folder named so: "
        "./shipped)",
    )
    ca.add_argument(
        "--service",
        action="append",
        default=[],
        metavar="URL|mock:RULE|MODEL_DIR|recorded[:LABEL]",
        help="a reward service to score with (repeat to compare services side by side); "
        "MODEL_DIR: a model written by fit-reward, served here; "
        "'recorded': the progress the model reported while the episodes were recorded; "
        "'recorded:LABEL': a LeRobot dataset's reward_model.LABEL.* columns (relabel)",
    )
    ca.add_argument(
        "--camera",
        default=None,
        help="the camera to score (default: the reward "
        "camera, or the dataset's observation.images.image)",
    )
    ca.add_argument(
        "--orientation",
        choices=("rot180", "upright", "raw"),
        default=None,
        help="how a LeRobot dataset's LIBERO frames are turned from MuJoCo's render when it does "
        "not say (lerobot/libero: rot180); they are scored upright",
    )
    ca.add_argument("--out", default=None, help="report folder (default: runs/calibrate-<time>)")
    ca.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="done threshold in [0, 1] (default: the --config's done_threshold, else the one "
        "the recorded run used, else 0.95)",
    )
    ca.add_argument("--max-frames", type=int, default=32, help="frames scored per episode")
    ca.add_argument(
        "--config",
        action="append",
        default=None,
        help="no recordings: run --episodes new ones with this config first (repeatable)",
    )
    ca.add_argument("--episodes", type=int, default=10, help="new episodes with --config")
    ca.add_argument("--policy", default="random", help="policy of the new episodes")
    ca.add_argument("--max-steps", type=int, default=None, help="episode limit of new episodes")


def _calibrate(args: argparse.Namespace) -> int:
    import time

    from evolve_envs.cli.calibrate import calibrate, check_services
    from evolve_envs.cli.reports.calibrate import summary_line, write_report

    out = Path(args.out or f"runs/calibrate-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.threshold is None:  # the config's, else the recorded run's, else 0.95
        args.threshold = 0.95
        if args.config:
            from evolve_envs.stack.loading import load_config

            args.threshold = float(load_config(*args.config).reward_model.done_threshold)
        else:
            from evolve_envs.recording.episodes import open_recording
            from evolve_envs.recording.shipped import resolve_recording

            found = [
                open_recording(resolve_recording(r)).meta.get("done_threshold")
                for r in args.recordings
            ]
            found = [float(t) for t in found if t is not None]
            if found:
                args.threshold = found[0]
    if not 0 <= args.threshold <= 1:
        raise ValueError(f"--threshold is a fraction in [0, 1], got {args.threshold}")
    if args.max_frames < 2:
        raise ValueError(f"--max-frames must be >= 2, got {args.max_frames}")
    # before any episode runs: a malformed spec or a dead service fails now (one line, status 3)
    check_services(args.service)
    recordings = list(args.recordings)
    if not recordings:
        if not args.config:
            raise ValueError("give recording folders, or --config (and --episodes) to run new ones")
        from evolve_envs.cli.rollout import RolloutOptions, run_rollout

        rec = out / "episodes"
        run_rollout(
            RolloutOptions(
                config=args.config,
                episodes=args.episodes,
                policy=args.policy,
                out=out / "rollout",
                video=False,
                progress_bar=False,
                record=rec,
                max_steps=args.max_steps,
            )
        )
        recordings = [str(rec)]
    report = calibrate(
        recordings,
        args.service,
        threshold=100 * args.threshold,
        max_frames=args.max_frames,
        camera=args.camera,
        orientation=args.orientation,
    )
    if report["assumed_successes"]:
        print(
            f"{report['assumed_successes']} episode(s) without next.success count as "
            "successful demonstrations"
        )
    write_report(report, out)
    for name, svc in report["services"].items():
        print(summary_line(name, svc["overall"], args.threshold))
    written = sorted(p.name for p in Path(out).iterdir() if p.suffix in (".md", ".json", ".png"))
    print(f"wrote {out}: {', '.join(written)}")
    return 0


#: name -> (add the subparser, run it). A new subcommand adds one entry and its two functions.
COMMANDS: dict[
    str,
    tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]],
] = {
    "rollout": (_add_rollout, _rollout),
    "tasks": (_add_tasks, _tasks),
    "train": (add_train, run_train_command),
    "evaluate": (add_evaluate, run_evaluate),
    "calibrate": (_add_calibrate, _calibrate),
    "export": (export.add_parser, export.run),
    "relabel": (relabel.add_parser, relabel.run),
    "fit-reward": (fit_reward.add_parser, fit_reward.run),
    "demos": (demos.add_parser, demos.run),
    "clone": (clone.add_parser, clone.run),
    "demo": (add_demo, run_demo),
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evolve-envs", description="LIBERO environments with reward-model shaping."
    )
    debug_help = "show the traceback of expected failures too (or set EVOLVE_ENVS_DEBUG=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _run in COMMANDS.values():
        add(sub)
    for command in sub.choices.values():  # also after the subcommand: `rollout --debug`
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status (see :class:`ExitStatus`).

    Expected failures print one line (``evolve-envs <command>: error: ...``); ``--debug`` or
    ``EVOLVE_ENVS_DEBUG=1`` adds their traceback (:mod:`evolve_envs.cli.errors`)."""
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    # KEY=VALUE overrides may come in several runs between options (`a=1 --episodes 4 b=2`)
    if (
        extra
        and hasattr(args, "overrides")
        and all("=" in x and not x.startswith("-") for x in extra)
    ):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    configure_cli_logging()
    return run_command(
        f"evolve-envs {args.command}",
        lambda: COMMANDS[args.command][1](args),
        debug=getattr(args, "debug", False),
    )


if __name__ == "__main__":
    sys.exit(main())
