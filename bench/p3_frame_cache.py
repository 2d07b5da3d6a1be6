"""P3: frame-cache bytes per frame (JPEG q85 / q90 / q95, raw) and the effect on mock progress.

Frames go through the real :class:`evolve_envs.wrappers.frame_cache.FrameStore` (the storage of
``FrameCache``) with each encoding; bytes per frame is ``store.nbytes / len(store)``. Then the
mock backend's rules are computed exactly as the service does (frame resized to 448x448 by
``evolve_envs.reward.service.state.batching.prepare_frame``, then ``intensity_progress`` /
``change_progress`` against the episode's first frame) on the cached (decoded) frames and on the raw
frames; the table gives the max and mean absolute difference in progress points (0..100, the
integers the mock returns). JPEG q85 is also what every frame goes through on the wire (the clients'
default), so its row is the effect of the wire as well.

Frame sources: ``synthetic`` (:func:`_common.scene_frames`, textured 256x256) and, unless
``--no-libero`` / ``--quick``, ``LIBERO`` (LIBERO-10 task 0 agentview frames, 256x256 upright,
under a random policy; building the env costs ~10 s and ~2.5 GB).

Run::

    .venv/bin/python bench/p3_frame_cache.py             # ~40 s with LIBERO
    .venv/bin/python bench/p3_frame_cache.py --quick     # synthetic only, a few seconds
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import machine_note, print_table, scene_frames

from evolve_envs.reward.service.backends.mock import change_progress, intensity_progress
from evolve_envs.reward.service.state.batching import prepare_frame
from evolve_envs.wrappers.frame_cache import FrameStore

ENCODINGS: list[tuple[str, str, int]] = [
    ("raw", "raw", 90),
    ("jpeg q85 (wire)", "jpeg", 85),
    ("jpeg q90 (FrameCache default)", "jpeg", 90),
    ("jpeg q95", "jpeg", 95),
]


def libero_frames(n: int) -> list[np.ndarray]:
    from evolve_envs.envs.libero import LiberoEnv

    t0 = time.perf_counter()
    env = LiberoEnv("libero_10", 0, cameras=("agentview",), image_size=256)
    try:
        obs, _ = env.reset(seed=0)
        frames = [np.asarray(obs["agentview_image"]).copy()]
        rng = np.random.default_rng(0)
        for _ in range(n - 1):
            action = rng.uniform(-1, 1, 7).astype(np.float32)
            obs, *_ = env.step(action)
            frames.append(np.asarray(obs["agentview_image"]).copy())
    finally:
        env.close()
    print(f"LIBERO: {n} frames in {time.perf_counter() - t0:.1f} s", flush=True)
    return frames


def progress_pairs(frames: list[np.ndarray]) -> tuple[list[int], list[int]]:
    prepared = [prepare_frame(f) for f in frames]
    first = prepared[0]
    return (
        [intensity_progress(f) for f in prepared],
        [change_progress(f, first) for f in prepared],
    )


def measure(source: str, frames: list[np.ndarray]) -> list[list[Any]]:
    ref_int, ref_chg = progress_pairs(frames)
    rows = []
    for label, encoding, quality in ENCODINGS:
        store = FrameStore(encoding, jpeg_quality=quality, max_frames=len(frames) + 1)
        t0 = time.perf_counter()
        for t, f in enumerate(frames):
            store.add(t, f)
        add_ms = 1000 * (time.perf_counter() - t0) / len(frames)
        per_frame = store.nbytes / len(store)
        cached_int, cached_chg = progress_pairs(store.frames())
        d_int = np.abs(np.subtract(cached_int, ref_int))
        d_chg = np.abs(np.subtract(cached_chg, ref_chg))
        rows.append(
            [
                source,
                label,
                per_frame / 1024,
                frames[0].nbytes / per_frame,
                add_ms,
                int(d_int.max()),
                float(d_int.mean()),
                int(d_chg.max()),
                float(d_chg.mean()),
                f"{min(ref_int)}–{max(ref_int)} / {min(ref_chg)}–{max(ref_chg)}",
            ]
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run, synthetic frames only")
    p.add_argument("--frames", type=int, default=60, help="frames per source")
    p.add_argument("--no-libero", action="store_true", help="skip the LIBERO frames")
    args = p.parse_args()
    n = 12 if args.quick else args.frames
    print(f"P3 on {machine_note()}", flush=True)
    rows = measure("synthetic", scene_frames(n, 256, seed=2))
    if not (args.quick or args.no_libero):
        rows += measure("LIBERO", libero_frames(n))
    print_table(
        f"P3 frame cache: bytes per 256² frame and mock progress on cached vs raw frames "
        f"({n} frames per source)",
        [
            "frames",
            "cache encoding",
            "KiB/frame",
            "compression",
            "add ms/frame",
            "intensity max abs Δ",
            "intensity mean abs Δ",
            "change max abs Δ",
            "change mean abs Δ",
            "raw progress range (intensity / change)",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
