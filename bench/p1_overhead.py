"""P1: wrapper-stack overhead per step against the bare env, and JPEG encode cost per frame.

Env: :class:`_common.BenchEnv`, textured 256x256 frames, 20 ms ``step`` (sleep). Configurations,
measured side by side in interleaved rounds (one episode each per round):

* ``bare``: the env alone;
* ``reward off``: ``make_env`` with ``reward_model.enable: false`` (env + TimeLimit);
* ``FrameCache jpeg`` / ``FrameCache raw``: the env + TimeLimit + :class:`FrameCache` alone;
* ``reward on, sync`` / ``reward on, async``: the full ``make_env`` stack (TimeLimit,
  ProgressReward with pairwise critic, start 64 / every 16 / milestones 64; the progress stack has
  no FrameCache) against an embedded mock service with zero latency (the service answers as fast
  as HTTP allows). A sync check calls the client on the stepping thread;
* ``reward on, sync via executor``: the same stack with the client seen only through its
  ``submit_*`` methods, so each sync check is handed to the client's worker thread and waited
  for (how sync checks ran before);
* ``reward on, sync, previous stack``: the stack as it was before the progress stack lost its
  FrameCache: a FrameCache (JPEG q90) under ProgressReward, and sync checks through the executor.

Columns: mean ms per step; overhead = mean - bare mean (ms/step, all costs amortised, calls
included); "excl. calls" also subtracts the client-measured call round trips (sync only); the
median step time of *non-check* steps minus the bare median (the per-step cost of the wrappers
themselves); the ratio of bare to config throughput.

Then JPEG encode/decode of one 256x256 textured frame: simplejpeg (libjpeg-turbo, used by
FrameCache and the clients; its default chroma is 4:4:4), simplejpeg with 4:2:0 chroma (Pillow's
and OpenCV's default), Pillow, and OpenCV when installed, at quality 85 / 90 / 95.

Run::

    .venv/bin/python bench/p1_overhead.py           # ~1 min
    .venv/bin/python bench/p1_overhead.py --quick   # a few seconds
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import gymnasium as gym
import numpy as np
from _common import BenchEnv, Rounds, machine_note, median, print_table, scene_frames

from evolve_envs import make_env
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.frame_cache import FrameCache


def stack_config(url: str | None, steps: int, start: int, every: int, calls: str) -> dict:
    rm: dict[str, Any] = {"enable": False}
    if url is not None:
        rm = {
            "enable": True,
            "endpoint": url,
            "mode": "pairwise",
            "calls": calls,
            "start_step": start,
            "call_every": every,
            "milestone_every": 4 * every,
        }
    return {"env": {"step_delay_s": 0.02, "max_episode_steps": steps}, "reward_model": rm}


class SubmitOnly:
    """A progress client seen through its ``submit_*`` methods only (the executor hop)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def submit_pairwise_critic(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.submit_pairwise_critic(*args, **kwargs)

    def submit_trajectory_values(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.submit_trajectory_values(*args, **kwargs)

    def submit_done(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.submit_done(*args, **kwargs)


def via_executor(env: gym.Env) -> gym.Env:
    tracker = env.get_wrapper_attr("tracker")
    tracker.client = SubmitOnly(tracker.client)
    return env


def previous_stack(env: gym.Env) -> gym.Env:
    env.env = FrameCache(env.env, "agentview_image")  # under ProgressReward, above the TimeLimit
    return via_executor(env)


def run_episode(env: gym.Env, steps: int) -> dict[str, Any]:
    action = np.zeros(7, np.float32)
    env.reset(seed=0)
    durations, checked, latency = [], [], 0.0
    start = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        durations.append(time.perf_counter() - t0)
        is_check = bool(info.get("progress_checked", False))
        checked.append(is_check)
        if is_check:
            latency += float(info.get("reward_model_latency_s") or 0.0)
        if term:
            raise RuntimeError("benchmark episode terminated early")
    total = time.perf_counter() - start
    plain = [d for d, c in zip(durations, checked, strict=True) if not c]
    return {
        "mean_ms": 1000 * total / steps,
        "plain_median_ms": 1000 * median(plain),
        "latency_ms": 1000 * latency / steps,
        "calls": int(info.get("progress_calls", 0)),
    }


def bench_steps(args: argparse.Namespace) -> list[list[Any]]:
    steps, start, every = (40, 16, 8) if args.quick else (args.steps, 64, 16)
    with EmbeddedService("mock", {"rule": "intensity", "latency_ms": 0}) as svc:
        envs: dict[str, gym.Env] = {
            "bare": BenchEnv(step_delay_s=0.02),
            "reward off": make_env(
                stack_config(None, steps, start, every, "sync"), env_factory=BenchEnv
            ),
            "FrameCache jpeg q90": FrameCache(
                gym.wrappers.TimeLimit(BenchEnv(step_delay_s=0.02), steps), "agentview_image"
            ),
            "FrameCache raw": FrameCache(
                gym.wrappers.TimeLimit(BenchEnv(step_delay_s=0.02), steps),
                "agentview_image",
                encoding="raw",
            ),
            "reward on, sync": make_env(
                stack_config(svc.url, steps, start, every, "sync"), env_factory=BenchEnv
            ),
            "reward on, sync via executor": via_executor(
                make_env(stack_config(svc.url, steps, start, every, "sync"), env_factory=BenchEnv)
            ),
            "reward on, sync, previous stack": previous_stack(
                make_env(stack_config(svc.url, steps, start, every, "sync"), env_factory=BenchEnv)
            ),
            "reward on, async": make_env(
                stack_config(svc.url, steps, start, every, "async"), env_factory=BenchEnv
            ),
        }
        rounds = Rounds(list(envs), 1 if args.quick else args.repeats)
        try:
            for name in rounds:
                r = run_episode(envs[name], steps)
                rounds.record(name, r["mean_ms"], **r)
        finally:
            for env in envs.values():
                env.close()
    bare_mean = rounds.median("bare")
    bare_plain = rounds.extra_median("bare", "plain_median_ms")
    rows = []
    for name in envs:
        mean = rounds.median(name)
        lat = rounds.extra_median(name, "latency_ms")
        excl = mean - lat - bare_mean if ", sync" in name else float("nan")
        rows.append(
            [
                f"step: {name}",
                mean,
                mean - bare_mean,
                excl,
                rounds.extra_median(name, "plain_median_ms") - bare_plain,
                rounds.ratio(name, "bare", invert=True),
                int(rounds.extra_median(name, "calls")),
            ]
        )
    return rows


def _pillow_encode(frame: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _pillow_decode(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def encoders() -> dict[str, tuple[Any, Any]]:
    import simplejpeg

    out: dict[str, tuple[Any, Any]] = {
        "simplejpeg": (
            lambda f, q: simplejpeg.encode_jpeg(f, quality=q, colorspace="RGB"),
            lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB"),
        ),
        "simplejpeg 4:2:0": (
            lambda f, q: simplejpeg.encode_jpeg(
                f, quality=q, colorspace="RGB", colorsubsampling="420"
            ),
            lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB"),
        ),
        "Pillow": (_pillow_encode, _pillow_decode),
    }
    try:
        import cv2

        cv2.setNumThreads(1)
        out["OpenCV"] = (
            lambda f, q: cv2.imencode(".jpg", f[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, q])[
                1
            ].tobytes(),
            lambda d: cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_COLOR)[..., ::-1],
        )
    except ImportError:
        pass
    return out


def bench_jpeg(args: argparse.Namespace) -> list[list[Any]]:
    frames = scene_frames(16, 256, seed=1)
    reps = 20 if args.quick else 200
    codecs = encoders()
    qualities = (85, 90, 95)
    names = [(c, q) for q in qualities for c in codecs]
    enc_ms: dict[tuple[str, int], list[float]] = {k: [] for k in names}
    dec_ms: dict[tuple[str, int], list[float]] = {k: [] for k in names}
    sizes: dict[tuple[str, int], list[int]] = {k: [] for k in names}
    for r in range(reps):  # interleaved: one frame per codec per round
        frame = frames[r % len(frames)]
        for key in names if r % 2 == 0 else reversed(names):
            encode, decode = codecs[key[0]]
            t0 = time.perf_counter()
            data = encode(frame, key[1])
            t1 = time.perf_counter()
            decode(data)
            t2 = time.perf_counter()
            enc_ms[key].append(1000 * (t1 - t0))
            dec_ms[key].append(1000 * (t2 - t1))
            sizes[key].append(len(data))
    rows = []
    for codec, q in names:
        base = median(enc_ms[("simplejpeg", q)])
        enc = median(enc_ms[(codec, q)])
        rows.append(
            [
                f"JPEG 256² {codec} q{q}",
                enc,
                float("nan"),
                float("nan"),
                float("nan"),
                enc / base,
                f"decode {median(dec_ms[(codec, q)]):.3f} ms, "
                f"{median(sizes[(codec, q)]) / 1024:.1f} KiB",
            ]
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--steps", type=int, default=150, help="steps per episode")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    args = p.parse_args()
    print(f"P1 on {machine_note()}", flush=True)
    rows = bench_steps(args) + bench_jpeg(args)
    print_table(
        "P1 wrapper-stack overhead per step (20 ms env step, 256² frames) and JPEG cost per frame",
        [
            "measurement",
            "ms",
            "overhead ms/step",
            "excl. calls",
            "non-check step Δ ms",
            "ratio",
            "calls / notes",
        ],
        rows,
    )
    print(
        "ratio: step rows = config steps/s ÷ bare steps/s (throughput relative "
        "to bare, 1.0 = no cost); JPEG rows = encode time relative to simplejpeg at that quality."
    )


if __name__ == "__main__":
    main()
