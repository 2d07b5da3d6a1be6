"""Make the calibration reports shown in docs/trust.md, "Can I trust my reward model?".

Synthetic task: ReachPlace episodes from three scripted behaviours (the task done, the distractor
dragged onto the target, random actions), re-scored by three mock reward models served by real
local services (right: ``reach_place``; scene-blind: ``random``; gameable:
``reach_place_hackable``). LIBERO (``--libero``): a few short random-policy episodes of LIBERO-10
task 0 scored by the mock *change* and *random* rules — mocks, not reward models; they show the
report on real frames. A random policy never succeeds there, so only the failure counts are
defined (the report says so, and has no precision-recall curve).

Each report is written with a file prefix (``calib_synthetic_``, ``calib_libero_``): the Markdown
and the PNGs it links land side by side in ``--out`` under the names the links use.

    python bench/trust_report.py --out docs/img              # synthetic, ~1 min
    python bench/trust_report.py --out docs/img --libero     # + LIBERO, a few minutes on a CPU
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from evolve_envs import make_env
from evolve_envs.cli.calibrate import calibrate
from evolve_envs.cli.reports.calibrate import write_report
from evolve_envs.envs.synthetic import play_behaviours


def record_synthetic(root: Path, per_behaviour: int) -> None:
    cfg = {
        "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 40},
        "record": {"dir": str(root), "camera": "image"},
    }
    env = make_env(cfg)
    try:
        play_behaviours(env, dict.fromkeys(("task", "distractor", "random"), per_behaviour))
    finally:
        env.close()


def record_libero(root: Path, episodes: int, steps: int) -> None:
    env = make_env(
        ["libero_10", {"record": {"dir": str(root)}}],
        reward_model={"enable": False},
        max_episode_steps=steps,
    )
    rng = np.random.default_rng(0)
    try:
        for ep in range(episodes):
            env.reset(seed=ep)
            done = False
            while not done:
                *_, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
                done = terminated or truncated
    finally:
        env.close()


def frame_strip(root: Path, png: Path, n: int = 4) -> None:
    """``n`` evenly spaced recorded frames of the first episode, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evolve_envs.recording.episodes import open_recording

    ep = open_recording(root)[0]
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


def publish(report: dict, work: Path, out: Path, prefix: str) -> None:
    """Write the report with ``prefix`` into ``work``; copy its Markdown and PNGs into ``out``.

    Stale PNGs of an earlier run under the same prefix are removed first (a plot the report no
    longer draws must not stay behind).
    """
    write_report(report, work, prefix=prefix)
    for old in out.glob(f"{prefix}*.png"):
        if old.name != f"{prefix}frames.png":
            old.unlink()
    for path in sorted(work.iterdir()):
        if path.suffix in (".md", ".png"):
            shutil.copy(path, out / path.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--per-behaviour", type=int, default=8)
    ap.add_argument("--libero", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    work = Path(tempfile.mkdtemp())
    try:
        record_synthetic(work / "synthetic", args.per_behaviour)
        services = ["mock:reach_place", "mock:random", "mock:reach_place_hackable"]
        report = calibrate([work / "synthetic"], services, threshold=95.0)
        report["recordings"] = [
            f"ReachPlace-v0 ({args.per_behaviour} episodes each of the task done, the distractor "
            "dragged onto the target, random actions)"
        ]
        publish(report, work / "report_synthetic", out, "calib_synthetic_")
        if args.libero:
            record_libero(work / "libero", episodes=3, steps=60)
            services = ["mock:change", "mock:random"]
            report = calibrate([work / "libero"], services, threshold=95.0)
            report["recordings"] = ["LIBERO-10 task 0 (random actions, 60 steps each)"]
            publish(report, work / "report_libero", out, "calib_libero_")
            frame_strip(work / "libero", out / "calib_libero_frames.png")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote the reports into {out}")


if __name__ == "__main__":
    main()
