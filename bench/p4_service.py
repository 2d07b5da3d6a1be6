"""P4: reward service throughput, per-frame overhead of HTTP + decode + resize, batch fill.

Baselines, in process: the mock backend's ``critic_batch`` on frames already at model size
(448x448), and the service's per-frame preparation (``decode_image_b64`` + ``prepare_frame``:
base64 JPEG 256x256 -> RGB -> 448x448 bicubic).

Service: a real server (``EmbeddedService``, mock intensity rule) in its own process on
loopback; ``C`` client threads (1, 8, 32), each with its own keep-alive ``httpx.Client``, send
``POST /pairwise-critic`` (2 frames, 256x256 JPEG q85, payload pre-encoded so client-side JPEG is
not counted) in a closed loop for ``--seconds``. Two backends: latency 0 (the service is CPU-bound:
the numbers are its overhead) and latency 50 ms per batch (GPU-like: shows how the batcher fills
batches of up to 8 from concurrent requests). Batch fill = items / backend calls for the critic
kind, from ``GET /metrics`` before and after each measurement. Configurations alternate in rounds.

Per-frame overhead (latency-0 rows) = 1 / (frames/s) - the backend's in-process time per frame.
Clients and server share the same 2 cores, so at high concurrency the clients' own Python cost is
part of what is measured.

Run::

    .venv/bin/python bench/p4_service.py           # ~1 min
    .venv/bin/python bench/p4_service.py --quick   # ~10 s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
from _common import TASK, Rounds, closed_loop, machine_note, median, print_table, scene_frames

from evolve_envs.reward.clients.frame_encoding import encode_jpeg_b64
from evolve_envs.reward.service.backends.base import CriticItem
from evolve_envs.reward.service.backends.mock import MockBackend
from evolve_envs.reward.service.decoding.base64_images import decode_image_b64
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.reward.service.state.batching import prepare_frame


def in_process(frames: list[np.ndarray], reps: int) -> tuple[float, float, float]:
    """(backend, decode, resize) ms per frame, medians."""
    backend = MockBackend(rule="intensity", latency_ms=0)
    prepared = [prepare_frame(f) for f in frames]
    encoded = [encode_jpeg_b64(f, 85) for f in frames]
    backend_ms, decode_ms, resize_ms = [], [], []
    for r in range(reps):
        a, b = prepared[r % len(prepared)], prepared[(r + 1) % len(prepared)]
        t0 = time.perf_counter()
        backend.critic_batch([CriticItem(TASK, a, b, a)])
        t1 = time.perf_counter()
        decoded = decode_image_b64(encoded[r % len(encoded)])
        t2 = time.perf_counter()
        prepare_frame(decoded)
        t3 = time.perf_counter()
        backend_ms.append(1000 * (t1 - t0) / 2)  # one item = 2 frames
        decode_ms.append(1000 * (t2 - t1))
        resize_ms.append(1000 * (t3 - t2))
    return median(backend_ms), median(decode_ms), median(resize_ms)


def critic_batches(client: httpx.Client, url: str) -> tuple[int, int]:
    kind = client.get(url + "/metrics").json()["batches"]["by_kind"].get("critic", {})
    return kind.get("count", 0), kind.get("items", 0)


def load(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict[str, Any]:
    """Closed-loop load (:func:`_common.closed_loop`) with ``clients`` threads for ``seconds``;
    returns rates, latencies and the server's mean critic batch size over the window."""

    def make_call(i: int, stack: contextlib.ExitStack) -> Callable[[int], bool]:
        http = stack.enter_context(httpx.Client(timeout=30, trust_env=False))
        http.get(url + "/health")  # open the keep-alive connection before timing
        headers = {"content-type": "application/json"}

        def call(k: int) -> bool:
            body = bodies[k % len(bodies)]
            return http.post(url + "/pairwise-critic", content=body, headers=headers).is_success

        return call

    with httpx.Client(timeout=10, trust_env=False) as admin:
        r = closed_loop(make_call, clients, seconds, snapshot=lambda: critic_batches(admin, url))
    (b0, i0), (b1, i1) = r.before, r.after
    return {
        "req_s": r.req_s,
        "frames_s": 2 * r.req_s,
        "p50_ms": r.p50_ms,
        "p99_ms": r.p99_ms,
        "batch": (i1 - i0) / (b1 - b0) if b1 > b0 else float("nan"),
        "errors": r.errors,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of one measurement")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--gpu-latency-ms", type=float, default=50.0)
    args = p.parse_args()
    if args.quick:
        args.seconds, args.repeats, args.clients = 0.5, 1, [1, 4]
    print(f"P4 on {machine_note()}", flush=True)
    frames = scene_frames(8, 256, seed=3)
    backend_ms, decode_ms, resize_ms = in_process(frames, 20 if args.quick else 300)
    enc = [encode_jpeg_b64(f, 85) for f in frames]
    bodies = [
        json.dumps({"task": TASK, "image_a": enc[k], "image_b": enc[(k + 1) % len(enc)]}).encode()
        for k in range(len(enc))
    ]
    latencies = [0.0, args.gpu_latency_ms]
    services = {
        lat: EmbeddedService("mock", {"rule": "intensity", "latency_ms": lat}).start()
        for lat in latencies
    }
    try:
        names = [f"{lat:g}|{c}" for lat in latencies for c in args.clients]
        rounds = Rounds(names, args.repeats)
        for name in rounds:
            lat, c = name.split("|")
            r = load(services[float(lat)].url, bodies, int(c), args.seconds)
            rounds.record(name, r["frames_s"], **r)
    finally:
        for svc in services.values():
            svc.stop()

    rows: list[list[Any]] = [
        ["in process", "backend critic_batch (448²)", "-", 1000 / backend_ms, backend_ms,
         "-", "-", "-", "-"],
        ["in process", "decode base64 JPEG 256²", "-", 1000 / decode_ms, decode_ms,
         "-", "-", "-", "-"],
        ["in process", "resize 256²→448² (bicubic)", "-", 1000 / resize_ms, resize_ms,
         "-", "-", "-", "-"],
    ]  # fmt: skip
    for name in names:
        lat, c = name.split("|")
        fps = rounds.median(name)
        per_frame = 1000 / fps
        rows.append(
            [
                f"HTTP, backend {lat} ms/batch",
                "POST /pairwise-critic",
                int(c),
                fps,
                per_frame,
                per_frame - backend_ms if float(lat) == 0 else float("nan"),
                rounds.extra_median(name, "p50_ms"),
                rounds.extra_median(name, "p99_ms"),
                rounds.extra_median(name, "batch"),
            ]
        )
        if sum(e["errors"] for e in rounds.extra[name]):
            print(f"warning: {name}: requests failed", flush=True)
    print_table(
        "P4 reward service (mock backend): frames/s, per-frame overhead and batch fill",
        [
            "path",
            "work",
            "clients",
            "frames/s",
            "ms/frame",
            "overhead ms/frame",
            "p50 ms/request",
            "p99 ms/request",
            "batch fill",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
