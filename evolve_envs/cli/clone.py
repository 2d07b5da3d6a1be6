"""``evolve-envs clone``: a training config's policy cloned from the scripted LIBERO expert.

The expert plays the config's env from each of ``--init-states`` (reward model off); the
policy of the config's ``policy`` block is fitted to its successful episodes
(:mod:`evolve_envs.training.clone`) and written as a policy file (safetensors, no pickle) that a
training run starts from with ``policy.init_from=FILE``. ``--eval N`` then plays the clone on
the config's N held-out scenes (``eval.env_overrides``) and prints its success.

Usage (shell)::

    evolve-envs clone --config libero_object_finetune --out runs/libero-clone.safetensors \\
        --init-states 0-9 --noisy-repeats 2 --noise 0.3 --steps 2000 --seed 900
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evolve_envs.cli.demos import parse_range
from evolve_envs.cli.errors import CliError, ExitStatus

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``clone`` subcommand's options."""
    cl = sub.add_parser("clone", help="clone a policy from the scripted LIBERO expert")
    cl.add_argument("--config", action="append", default=[], help="training config (path or name)")
    cl.add_argument("--out", required=True, help="the policy file to write (.safetensors)")
    cl.add_argument("--init-states", default="0-9", help="the expert's init states (0-9)")
    cl.add_argument(
        "--noisy-repeats",
        type=int,
        default=2,
        help="plays of each init state with noise on the executed motion, labelled with the "
        "expert's action (DART; default 2)",
    )
    cl.add_argument("--noise", type=float, default=0.3, help="that noise's scale (0.3)")
    cl.add_argument("--steps", type=int, default=2000, help="Adam steps (2000)")
    cl.add_argument("--seed", type=int, default=0, help="seeds the fit (0)")
    cl.add_argument("--eval", type=int, default=0, metavar="N", help="held-out scenes to play")
    cl.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")


def run(args: argparse.Namespace) -> int:
    """Run ``evolve-envs clone``."""
    from evolve_envs.training.clone import clone_policy, expert_episodes
    from evolve_envs.training.config import load_train_config
    from evolve_envs.training.evaluation import evaluate_policy, held_out_seeds
    from evolve_envs.training.policy_file import save_policy_file

    if not args.config:
        raise CliError("--config: give the training config the clone is for", ExitStatus.USAGE)
    try:
        inits = parse_range(args.init_states)
    except ValueError as exc:
        raise CliError(f"--init-states: {exc}", ExitStatus.USAGE) from None
    cfg = load_train_config(*args.config, overrides=args.overrides)
    start = time.perf_counter()

    def said(init: int, success: bool, steps: int) -> None:
        print(f"  init state {init}: {'success' if success else 'failure'} in {steps} steps")

    print(f"the scripted expert plays init states {args.init_states}:")
    demos = expert_episodes(
        cfg, inits, noisy_repeats=args.noisy_repeats, noise=args.noise, on_episode=said
    )
    policy, report = clone_policy(cfg, demos, steps=args.steps, seed=args.seed)
    info: dict[str, object] = {
        "config": cfg.stored(),
        "algo": "clone",
        "counters": {"updates": report.steps, "env_steps_in": 0},
        "clone": {
            **report.as_dict(),
            "init_states": inits,
            "noisy_repeats": args.noisy_repeats,
            "noise": args.noise,
            "episodes_kept": len(demos.succeeded),
            "episodes_played": len(demos.played),
        },
    }
    if args.eval:
        seeds = held_out_seeds(args.eval, cfg.eval.seed_offset)
        result = evaluate_policy(cfg, policy, seeds, num_envs=cfg.eval.num_envs)
        info["eval"] = {"success": result.success_rate, "episodes": result.episodes}
    assert demos.observation_space is not None and demos.action_space is not None
    out = save_policy_file(
        Path(args.out), policy.state_dict(), info, demos.observation_space, demos.action_space
    )
    print(
        f"cloned from {len(demos.succeeded)}/{len(demos.played)} expert episodes "
        f"({report.samples} steps): loss {report.loss_first:.2f} -> {report.loss_last:.2f} "
        f"in {report.steps} Adam steps; wrote {out} in {time.perf_counter() - start:.0f} s"
    )
    if "eval" in info:
        print(f"held-out success (mean action): {json.dumps(info['eval'])}")
    return ExitStatus.OK
