"""``evolve-envs fit-reward DATA --out MODEL_DIR``: fit a progress model on recorded episodes
(:mod:`evolve_envs.reward.fitting.trainer`).

Usage (shell)::

    evolve-envs fit-reward runs/rec --out runs/rp-model --epochs 30 --seed 0
"""

from __future__ import annotations

import argparse

from evolve_envs.cli.errors import ExitStatus

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``fit-reward`` subcommand's options."""
    fr = sub.add_parser("fit-reward", help="fit a progress model on a dataset's episodes")
    fr.add_argument("data", help="a LeRobotDataset v3 folder, a recording folder or 'shipped'")
    fr.add_argument("--out", required=True, help="the model directory to write")
    fr.add_argument("--epochs", type=int, default=30, help="passes over the training frames")
    fr.add_argument("--batch-size", type=int, default=64)
    fr.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate")
    fr.add_argument("--seed", type=int, default=0, help="initialisation, split and batches")
    fr.add_argument(
        "--held-out", type=float, default=0.2, help="fraction of the episodes held out (by episode)"
    )
    fr.add_argument("--camera", default=None, help="the camera to fit on (default: the data's)")
    fr.add_argument("--input-size", type=int, default=64, help="frames are resized to this")
    fr.add_argument("--channels", type=int, default=16, help="convolution channels")
    fr.add_argument("--device", default="auto", help="auto (a GPU if torch sees one), cpu, cuda")
    fr.add_argument(
        "--backbone",
        default=None,
        metavar="PATH",
        help="a local transformers vision encoder (config.json + safetensors) to fit a head on",
    )
    fr.add_argument(
        "--demonstrations",
        action="store_true",
        help="a dataset without next.success: every episode is a success",
    )
    fr.add_argument(
        "--failure-cap",
        type=float,
        default=0.8,
        help="a failed episode's frames are held below this progress",
    )
    fr.add_argument(
        "--done-gap",
        action="store_true",
        help="label a success's frames before its last below the failure cap, so done "
        "stands apart from the frames just before it",
    )
    fr.add_argument(
        "--done-on",
        choices=("episode", "frame"),
        default="episode",
        help="pick the done threshold on episodes (highest progress against success) or on "
        "frames (a success's last frame against every other frame)",
    )
    fr.add_argument("--name", default=None, help="the model's name (default: the folder's)")
    fr.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run ``evolve-envs fit-reward``."""
    from evolve_envs.reward.fitting.trainer import FitOptions, fit_reward

    opts = FitOptions(
        data=args.data,
        out=args.out,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        held_out=args.held_out,
        camera=args.camera,
        input_size=args.input_size,
        channels=args.channels,
        device=args.device,
        backbone=args.backbone,
        demonstrations=args.demonstrations,
        name=args.name,
        progress=not args.no_progress,
        failure_cap=args.failure_cap,
        done_gap=args.done_gap,
        done_on=args.done_on,
    )
    try:
        report = fit_reward(opts)
    except KeyboardInterrupt:
        print(
            "\nevolve-envs fit-reward: interrupted; the last finished epoch is kept: run the "
            "same command again to resume",
            flush=True,
        )
        return ExitStatus.INTERRUPTED
    held = report["held_out"]

    def num(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    print(
        f"wrote {args.out} ({report['content_hash']}, {report['size_bytes']} bytes, "
        f"{report['fit_s']:.0f} s): held-out VOC {num(held['voc'])}, done precision "
        f"{num(held['done_precision'])} recall {num(held['done_recall'])} on "
        f"{held['episodes']} episodes (done at {report['done_threshold']:.2f})"
    )
    return ExitStatus.OK
