"""Make the calibration reports shown in the README ("Can I trust my reward model?").

``synthetic``: records ReachPlace episodes from three scripted behaviours (the task done, the
distractor dragged onto the target, random actions) and scores them with three mock reward
models: right (``reach_place``), random (``random``) and gameable (``reach_place_hackable``).
``libero``: records random-action LIBERO-10 episodes and scores them with two mock rules
(``change``, ``random``); no model here is a real reward model, and a random policy does not
succeed, so it shows the report on LIBERO frames, not a real model's quality.

Usage::

    python scripts/calibration_examples.py synthetic --out runs/calib-synthetic --img docs/img
    python scripts/calibration_examples.py libero --out runs/calib-libero --img docs/img
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from evolve_envs.calibrate import calibrate, write_report

SYNTHETIC_BEHAVIOURS = {"task": 8, "distractor": 6, "random": 6}
SYNTHETIC_SERVICES = ["mock:reach_place", "mock:random", "mock:reach_place_hackable"]


def record_synthetic(root: Path, behaviours: dict[str, int], max_steps: int = 40) -> Path:
    """Record ReachPlace episodes, ``behaviours[goal]`` of each scripted goal (or random)."""
    from evolve_envs.factory import make_env
    from evolve_envs.synthetic import scripted_action

    env = make_env(
        {"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": max_steps},
         "record": {"dir": str(root), "camera": "image"}}
    )  # fmt: skip
    rng = np.random.default_rng(0)
    seed = 0
    try:
        for goal, count in behaviours.items():
            for _ in range(count):
                env.reset(seed=seed)
                seed += 1
                done = False
                while not done:
                    if goal == "random":
                        action = rng.uniform(-1, 1, 2).astype(np.float32)
                    else:
                        action = scripted_action(env.unwrapped, goal)
                    *_, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
    finally:
        env.close()
    return root


def record_libero(root: Path, episodes: int, max_steps: int) -> Path:
    """Record random-action LIBERO-10 task-0 episodes through the rollout command's code."""
    from evolve_envs.rollout import RolloutOptions, run_rollout

    run_rollout(
        RolloutOptions(
            config=["libero_10"], episodes=episodes, max_steps=max_steps, policy="random",
            out=root.parent / "rollout", video=False, progress_bar=False, tensorboard=False,
            record=root,
        )
    )  # fmt: skip
    return root


def frame_strip(rec: Path, png: Path, n: int = 4) -> None:
    """``n`` evenly spaced recorded frames of the first episode, side by side, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wrappers.recording import open_recording

    ep = open_recording(rec)[0]
    steps = np.linspace(0, len(ep), n).round().astype(int).tolist()
    fig, axes = plt.subplots(1, n, figsize=(2.0 * n, 2.3))
    for ax, step, frame in zip(axes, steps, ep.frames(steps), strict=True):
        ax.imshow(frame)
        ax.set_title(f"step {step}", fontsize=8)
        ax.axis("off")
    fig.suptitle(f"recorded frames: {ep.meta['task']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=72)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["synthetic", "libero"])
    parser.add_argument("--out", required=True, help="report folder (the recording goes inside)")
    parser.add_argument("--img", default=None, help="also copy the PNGs here as calib_<which>_*")
    parser.add_argument("--episodes", type=int, default=3, help="libero: episodes")
    parser.add_argument("--max-steps", type=int, default=60, help="libero: steps per episode")
    args = parser.parse_args(argv)
    out = Path(args.out)
    rec = out / "episodes"
    if rec.exists():
        shutil.rmtree(rec)
    if args.which == "synthetic":
        record_synthetic(rec, SYNTHETIC_BEHAVIOURS)
        services = SYNTHETIC_SERVICES
    else:
        record_libero(rec, args.episodes, args.max_steps)
        services = ["mock:change", "mock:random"]
    report = calibrate([rec], services, threshold=95.0, max_frames=32)
    write_report(report, out)
    for name, svc in report["services"].items():
        m = svc["overall"]
        print(
            f"{name}: done P/R/F1 {m['done']['precision']}/{m['done']['recall']}/"
            f"{m['done']['f1']}, VOC {m['voc']}, failures judged high "
            f"{m['failures_judged_high']}, successes judged low {m['successes_judged_low']}, "
            f"negative critics {m['negative_critic_rate']}, p50 {m['latency_p50_s']} s"
        )
    if args.img:
        img = Path(args.img)
        img.mkdir(parents=True, exist_ok=True)
        # LIBERO with a random policy has no successes: its PR curve is empty, not shown
        pngs = ["pr_curve.png", "progress_curves.png"] if args.which == "synthetic" else []
        for png in pngs or ["progress_curves.png"]:
            shutil.copy(out / png, img / f"calib_{args.which}_{png}")
        frame_strip(rec, img / f"calib_{args.which}_frames.png")
    print(f"wrote {out}/report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
