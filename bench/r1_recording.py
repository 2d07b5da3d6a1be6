"""R1: the cost of recording episodes (``RecordEpisodes``), side by side with not recording.

Per configuration, in interleaved rounds (``_common.Rounds``): wall time of whole episodes of
:class:`_common.BenchEnv` (textured 256x256 frames, no simulated step time, so the recorder's
cost is not hidden behind the simulator's), bare vs recorded at JPEG q90 and q75; the time the
recorder adds per step (compare with the simulator's step: ~250 ms for LIBERO on a CPU) and the
ratio to bare (large by construction: the bare step does almost nothing); bytes per frame on
disk (the Parquet files / frames; every frame distinct); and the memory the recorder holds for one
running episode (its JPEG frames, measured at the episode's last step) against the raw frames it
would hold without encoding.

``--libero``: the same question on a real LIBERO rollout, with the LeRobot export counted in.
One ``LiberoEnv`` (LIBERO-10 task 0, agentview + wrist at 256x256, as ``libero_10.yaml``), random
actions; episodes alternate between recording off and ``RecordEpisodes`` on (both cameras, the
state, the actions), resets not timed. Then the whole recording is exported to a LeRobotDataset
v3 (``export_lerobot``: AV1 as LeRobot encodes, and H.264), and the export's wall time is spread
over the recorded steps. The recorder's own time is measured directly (the episode's time minus
the time spent in the env below it), because a LIBERO step's time varies between episodes by more
than the recorder costs on a shared machine. "writing, % of off" = (recorder + export) per step
over the off rollout's step, median over rounds (the R1 goal: <= 5 %); the plain wall-time ratio
of recorded to off episodes is printed too.

Run::

    .venv/bin/python bench/r1_recording.py            # ~1 min
    .venv/bin/python bench/r1_recording.py --quick    # a few seconds
    MUJOCO_GL=egl .venv/bin/python bench/r1_recording.py --libero   # ~3 min: 3 rounds x 60 steps
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import BenchEnv, Rounds, machine_note, median, print_table

from evolve_envs.wrappers.record_episodes import RecordEpisodes

CONFIGS: dict[str, int | None] = {"bare": None, "recorded q90": 90, "recorded q75": 75}


def run_episode(env: gym.Env, steps: int) -> tuple[float, int]:
    """Seconds for one episode, and the recorder's held frame bytes at its last step."""
    held = 0
    t0 = time.perf_counter()
    env.reset(seed=0)
    for t in range(steps):
        if t == steps - 1 and isinstance(env, RecordEpisodes):
            # before the step that writes the episode
            held = sum(len(f) for frames in env._frames.values() for f in frames)
        env.step(env.action_space.sample())
    return time.perf_counter() - t0, held


class Timed(gym.Wrapper):
    """Sums the seconds spent in the wrapped env's ``step`` (what the recorder above it waits
    for), so the recorder's own time is the episode's time minus this."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.inner_s = 0.0

    def step(self, action: Any) -> Any:
        t0 = time.perf_counter()
        out = self.env.step(action)
        self.inner_s += time.perf_counter() - t0
        return out


def libero_episode(env: gym.Env, steps: int, seed: int) -> float:
    """Seconds for the steps of one LIBERO episode (the reset is not timed)."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        *_, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 7))
        if terminated or truncated:
            break
    return time.perf_counter() - t0


def libero_main(steps: int, repeats: int) -> None:
    from evolve_envs.envs.libero import LiberoEnv
    from evolve_envs.recording.lerobot_export import export_lerobot

    work = Path(tempfile.mkdtemp())
    loads = [os.getloadavg()[0]]
    base = LiberoEnv("libero_10", task_id=0, image_size=256, init_state=0)
    off = gym.wrappers.TimeLimit(base, steps)
    codecs = ("av1", "h264")
    per_round: list[dict[str, float]] = []
    try:
        libero_episode(off, 5, seed=99)  # warm-up: the simulator
        export_lerobot  # noqa: B018 - imported before the timing
        for r in range(repeats):  # each round: off, recorded, then that episode exported
            timed = Timed(gym.wrappers.TimeLimit(base, steps))
            rec = RecordEpisodes(timed, work / f"rec{r}", camera="agentview_image")
            row: dict[str, float] = {}
            for name in ("off", "recorded") if r % 2 == 0 else ("recorded", "off"):
                row[name] = libero_episode(off if name == "off" else rec, steps, seed=r)
            row["recorder"] = row["recorded"] - timed.inner_s  # its own time, steps only
            for codec in codecs:
                t0 = time.perf_counter()
                export_lerobot(work / f"rec{r}", work / f"ds{r}-{codec}", codec=codec)
                row[codec] = time.perf_counter() - t0
            per_round.append(row)
            loads.append(os.getloadavg()[0])
        disk = {
            c: sum(f.stat().st_size for f in (work / f"ds0-{c}").rglob("*") if f.is_file())
            for c in codecs
        }
    finally:
        base.close()
        shutil.rmtree(work, ignore_errors=True)

    def med(key: str) -> float:
        return median([row[key] for row in per_round])

    def share(*keys: str) -> float:  # median over rounds of (sum of keys - off) / off
        return median([100 * (sum(row[k] for k in keys) - row["off"]) / row["off"]
                       for row in per_round])  # fmt: skip

    def own(*keys: str) -> float:  # median over rounds of the writing's own time / off
        return median([100 * sum(row[k] for k in keys) / row["off"] for row in per_round])

    ms = 1000 / steps
    rows = [
        ["recording off", med("off") * ms, 0.0, 0.0, 0.0],
        ["recorded (rollout --record)", med("recorded") * ms, med("recorder") * ms, 0.0,
         own("recorder")],
    ]  # fmt: skip
    for codec in codecs:
        rows.append([f"recorded + export ({codec})", med("recorded") * ms, med("recorder") * ms,
                     med(codec) * ms, own("recorder", codec)])  # fmt: skip
    load = "load avg " + " -> ".join(f"{x:.1f}" for x in loads)
    print_table(
        f"R1 (LIBERO) — {steps}-step episodes, agentview + wrist 256x256, median of {repeats} "
        f"rounds ({machine_note(load)})",
        ["config", "rollout ms / step", "recorder ms / step", "export ms / step",
         "writing, % of off"],
        rows,
    )  # fmt: skip
    print(
        f"wall time recorded vs off, median of per-round ratios: {share('recorded'):+.1f} % "
        "(the simulator's own spread between episodes on a loaded machine can exceed it)"
    )
    size = ", ".join(f"{c} {disk[c] / (steps + 1) / 1024:.1f} KiB" for c in codecs)
    print(f"dataset size per frame (2 cameras): {size}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--libero", action="store_true", help="a real LIBERO rollout + the export")
    ap.add_argument("--steps", type=int, default=60, help="--libero: steps per episode")
    ap.add_argument("--rounds", type=int, default=3, help="--libero: rounds")
    args = ap.parse_args()
    if args.libero:
        libero_main(*((20, 1) if args.quick else (args.steps, args.rounds)))
        return
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
