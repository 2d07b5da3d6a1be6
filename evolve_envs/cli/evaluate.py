"""``evolve-envs evaluate``: a saved policy's success on held-out scenes, as JSON and an MP4
(:func:`evolve_envs.training.evaluation.evaluate_saved`).

Usage (shell)::

    evolve-envs evaluate runs/rp --best --episodes 50 --videos 5
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_evaluate", "run_evaluate"]


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    """The ``evaluate`` subcommand's arguments."""
    ev = sub.add_parser("evaluate", help="held-out success of a saved policy (JSON + MP4)")
    ev.add_argument(
        "source",
        metavar="RUN_OR_CHECKPOINT",
        help="a run directory (its policy.safetensors), a policy file (.safetensors) or a .pt "
        "(checkpoint, snapshot, an older run's best.pt)",
    )
    ev.add_argument("--best", action="store_true", help="a run directory's best.safetensors")
    ev.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="open a .pt that needs Python's full unpickler, which runs any code its author put "
        "in it: only a file you trust (docs/security.md)",
    )
    ev.add_argument("--episodes", type=int, default=None, help="held-out scenes (eval.episodes)")
    ev.add_argument("--num-envs", type=int, default=None, help="envs played at once")
    ev.add_argument("--videos", type=int, default=3, metavar="N", help="episodes in the MP4")
    ev.add_argument("--no-sampled", action="store_true", help="the mean action only")
    ev.add_argument("--sample-seed", type=int, default=0, help="seed of the sampled actions")
    ev.add_argument("--out", default=None, help="output folder (default: beside the policy)")
    ev.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config keys for the evaluation, e.g. env.max_episode_steps=80",
    )


def run_evaluate(args: argparse.Namespace) -> int:
    """Evaluate, write the files, print the numbers (exit status 0)."""
    for name in ("episodes", "num_envs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.videos < 0:
        raise ValueError(f"--videos must be >= 0, got {args.videos}")
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "evaluating a policy needs torch: pip install 'evolve-envs[distrl]'"
        ) from exc
    from evolve_envs.training.config import load_train_config
    from evolve_envs.training.evaluation import evaluate_saved, read_saved

    saved = read_saved(args.source, best=args.best, trust=args.trust_checkpoint)
    if args.overrides:
        saved.cfg = load_train_config(saved.cfg, overrides=list(args.overrides))
    out = Path(args.out) if args.out else saved.path.parent / f"evaluate-{saved.path.stem}"
    result = evaluate_saved(
        saved,
        out,
        episodes=args.episodes,
        num_envs=args.num_envs,
        sampled=not args.no_sampled,
        videos=args.videos,
        sample_seed=args.sample_seed,
    )
    det, smp = result["deterministic"], result["sampled"]
    source = f"the env's success flag, {det['episodes']} held-out scenes"
    print(
        f"{saved.path}: held-out success {det['success_rate']:.2f} with the mean action ({source})"
    )
    if smp is not None:
        print(
            f"{saved.path}: held-out success {smp['success_rate']:.2f} with sampled actions "
            f"(seed {smp['sample_seed']})"
        )
    files = ["result.json"] + ([result["video"]] if result.get("video") else [])
    print(f"wrote {out}: {', '.join(files)}")
    return 0
