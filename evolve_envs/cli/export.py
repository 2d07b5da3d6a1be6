"""``evolve-envs export``: a recording as a LeRobotDataset v3 folder, moved into ``--out`` when
complete (:func:`evolve_envs.recording.lerobot_export.export_lerobot`).

Usage (shell)::

    evolve-envs export runs/rec --format lerobot --out runs/rec-lerobot
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from evolve_envs.cli.errors import CliError, ExitStatus

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``export`` subcommand's options."""
    from evolve_envs.recording.lerobot_video import CODECS

    ex = sub.add_parser("export", help="convert a recording into a LeRobotDataset v3 folder")
    ex.add_argument("recording", help="a recording folder (rollout --record DIR)")
    ex.add_argument(
        "--format",
        choices=("lerobot",),
        default="lerobot",
        help="the dataset format (LeRobotDataset v3.0)",
    )
    ex.add_argument("--out", required=True, help="the new dataset folder (must not exist)")
    ex.add_argument(
        "--codec",
        choices=sorted(CODECS),
        default="av1",
        help="video codec: av1 (LeRobot's default, libsvtav1), h264, or lossless (libx264rgb)",
    )
    ex.add_argument("--fps", type=int, default=None, help="frame rate (default: the env's)")
    ex.add_argument(
        "--orientation",
        choices=("lerobot", "as_recorded"),
        default="lerobot",
        help="LIBERO cameras as lerobot/libero has them (180 degrees from MuJoCo's render; the "
        "default) or as recorded",
    )
    ex.add_argument("--task", default=None, help="the instruction of episodes recorded without one")
    ex.add_argument(
        "--final-frame",
        choices=("keep", "drop"),
        default="keep",
        help="the observation after an episode's last action: a last frame with that action "
        "repeated, next.reward 0 and next.done (keep, as lerobot_eval pads it), or no frame",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``evolve-envs export``."""
    from evolve_envs.recording.lerobot_export import export_lerobot
    from evolve_envs.recording.lerobot_read import LeRobotRecording

    out = Path(args.out)
    if out.exists():
        raise CliError(f"{out} exists; give a new folder with --out", ExitStatus.USAGE)
    if not (Path(args.recording) / "meta.json").is_file():
        raise CliError(
            f"{args.recording} is not a recording (no meta.json); record one with "
            "`evolve-envs rollout --record DIR`",
            ExitStatus.USAGE,
        )
    start = time.perf_counter()
    export_lerobot(
        args.recording,
        out,
        codec=args.codec,
        fps=args.fps,
        orientation=args.orientation,
        task=args.task,
        final_frame=args.final_frame,
    )
    ds = LeRobotRecording(out)
    frames = ds.info["total_frames"]
    cameras = ", ".join(ds.cameras)
    print(
        f"wrote {out}: LeRobotDataset v3.0, {len(ds)} episodes, {frames} frames at "
        f"{ds.info['fps']} fps, cameras {cameras}, {args.codec} video "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return ExitStatus.OK
