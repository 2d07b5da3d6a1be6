"""R1: the cost of recording episodes (``RecordEpisodes``), side by side with not recording.

Per configuration, in interleaved rounds (``_common.Rounds``): wall time of whole episodes of
:class:`_common.BenchEnv` (textured 256x256 frames, no simulated step time, so the recorder's
cost is not hidden behind the simulator's), bare vs recorded at JPEG q90 and q75; the time the
recorder adds per step (compare with the simulator's step: ~250 ms for LIBERO on a CPU) and the
ratio to bare (large by construction: the bare step does almost nothing); bytes per frame on
disk (the Parquet files / frames; every frame distinct); and the memory the recorder holds for one
running episode (its JPEG frames, measured at the episode's last step) against the raw frames it
would hold without encoding.

Run::

    .venv/bin/python bench/r1_recording.py            # ~1 min
    .venv/bin/python bench/r1_recording.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
from _common import BenchEnv, Rounds, machine_note, print_table

from evolve_envs.wrappers.record_episodes import RecordEpisodes

CONFIGS: dict[str, int | None] = {"bare": None, "recorded q90": 90, "recorded q75": 75}


def run_episode(env: gym.Env, steps: int) -> tuple[float, int]:
    """Seconds for one episode, and the recorder's held frame bytes at its last step."""
    held = 0
    t0 = time.perf_counter()
    env.reset(seed=0)
    for t in range(steps):
        if t == steps - 1 and isinstance(env, RecordEpisodes):
            held = sum(len(f) for f in env._frames)  # before the step that writes the episode
        env.step(env.action_space.sample())
    return time.perf_counter() - t0, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    steps, repeats = (40, 2) if args.quick else (200, 5)
    work = Path(tempfile.mkdtemp())
    envs: dict[str, Any] = {}
    try:
        for name, quality in CONFIGS.items():
            # every frame distinct: Parquet would dictionary-encode repeated JPEGs
            base = gym.wrappers.TimeLimit(
                BenchEnv(size=256, step_delay_s=0.0, bank=steps + 1), steps
            )
            envs[name] = (
                base if quality is None else RecordEpisodes(base, work / name, jpeg_quality=quality)
            )
        for name in CONFIGS:  # warm-up: imports, first Parquet write, encoder set-up
            run_episode(envs[name], steps)
        rounds = Rounds(list(CONFIGS), repeats=repeats)
        held: dict[str, int] = {}
        for name in rounds:
            seconds, held[name] = run_episode(envs[name], steps)
            rounds.record(name, seconds)
        raw_bytes = 256 * 256 * 3 * steps  # frames 0..steps-1 held before the last step
        rows = []
        for name, quality in CONFIGS.items():
            per_step_ms = 1000 * rounds.median(name) / steps
            added_ms = per_step_ms - 1000 * rounds.median("bare") / steps
            if quality is None:
                rows.append([name, per_step_ms, 0.0, 1.0, "–", "–", "–"])
                continue
            files = list((work / name / "episodes").glob("*.parquet"))
            episodes = len(files)
            disk = sum(f.stat().st_size for f in files) / (episodes * (steps + 1))
            rows.append([
                name, per_step_ms, added_ms, rounds.ratio(name, "bare"), f"{disk / 1024:.1f} KiB",
                f"{held[name] / 2**20:.2f} MiB", f"{raw_bytes / 2**20:.2f} MiB",
            ])  # fmt: skip
        print_table(
            f"R1 — recording cost, {steps}-step episodes of 256x256 frames, median of {repeats} "
            f"rounds ({machine_note()})",
            [
                "config",
                "ms / step",
                "added ms / step",
                "x bare",
                "disk / frame",
                "held (1 episode)",
                "raw would be",
            ],  # fmt: skip
            rows,
        )
    finally:
        for env in envs.values():
            env.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
