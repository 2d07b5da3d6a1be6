"""P5: N reward services behind one EndpointPool; least-in-flight vs round-robin with a slow one.

Services: ``EmbeddedService`` mock backends on loopback whose backend sleeps ``--latency-ms``
(default 1000) per batch of up to 8 items — latency-bound, like a GPU model, so one service serves
at most ``8 / latency`` requests per second. Clients: ``--clients`` (default 32) threads sharing
one :class:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool` and one
:class:`~evolve_envs.reward.clients.progress_client.ProgressClient`, each calling
``pairwise_critic`` on 64x64 frames in a closed loop for ``--seconds`` (small frames keep the CPU
cost of the 2-core machine out of the way; P4 measures that cost).

Rows: 1, 2 and 4 equal services (least-in-flight); then 4 services of which one is 3x slower,
with ``selection="round_robin"`` and ``"least_in_flight"``. "ideal" is the services' combined
capacity (``sum 8 / latency``), capped by what the closed loop can ask for
(``clients / latency``); "share slow" is the fraction of requests the slow service got.
Configurations alternate in rounds; medians are reported.

Batch window. The services run with ``--batch-window-ms 50`` (``--batch-window-ms`` here; the
server's default is 5). With the default, closed-loop clients whose answers come back together
cannot re-send within 5 ms on a 2-core machine (HTTP, JPEG, decode and the 448x448 resize take
longer), so a busy backend splits them into alternating part-filled batches and each request
waits two backend calls instead of one; RESULTS.md shows both.

Run::

    .venv/bin/python bench/p5_endpoint_pool.py           # ~1.5 min
    .venv/bin/python bench/p5_endpoint_pool.py --quick   # ~15 s
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import TASK, Rounds, closed_loop, machine_note, print_table, scene_frames

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService


def load(urls: list[str], selection: str, frames: list[np.ndarray], clients: int,
         seconds: float, slow_url: str | None) -> dict[str, Any]:  # fmt: skip
    """Closed-loop load (:func:`_common.closed_loop`) through one shared pool: rate, latency
    and the share of requests the slow endpoint served in the window."""
    pool = EndpointPool(urls, selection=selection, timeout=60, max_retries=0)
    client = ProgressClient(pool, fail_on_request_error=True)

    def make_call(i: int, stack: contextlib.ExitStack) -> Callable[[int], bool]:
        def call(k: int) -> bool:
            a, b = frames[k % len(frames)], frames[(k + 1) % len(frames)]
            return client.pairwise_critic(TASK, a, b).ok

        return call

    def served() -> dict[str, int]:
        return {s["url"]: s["successes"] for s in pool.endpoint_stats()}

    try:
        client.capabilities()
        r = closed_loop(make_call, clients, seconds, snapshot=served)
    finally:
        client.close()
        pool.close()
    counts = {u: r.after[u] - r.before[u] for u in urls}
    total = sum(counts.values())
    return {
        "req_s": r.req_s,
        "p50_ms": r.p50_ms,
        "p99_ms": r.p99_ms,
        "share_slow": counts[slow_url] / total if slow_url and total else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--latency-ms", type=float, default=1000.0, help="backend latency per batch")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=6.0, help="duration of one measurement")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=50.0,
        help="the services' batch window (server default 5; see the module docstring)",
    )
    args = p.parse_args()
    if args.quick:
        args.latency_ms, args.clients, args.seconds, args.repeats = 50.0, 8, 1.0, 1
    print(f"P5 on {machine_note()}", flush=True)
    lat = args.latency_ms
    frames = scene_frames(8, 64, seed=4)
    extra = ["--batch-window-ms", str(args.batch_window_ms)]
    fast = [
        EmbeddedService("mock", {"rule": "intensity", "latency_ms": lat}, extra_args=extra)
        for _ in range(4)
    ]
    slow = EmbeddedService("mock", {"rule": "intensity", "latency_ms": 3 * lat}, extra_args=extra)
    try:
        for svc in [*fast, slow]:
            svc.start()
        f = [s.url for s in fast]
        cap = 8 * 1000 / lat  # one service: a full batch per latency
        bound = args.clients * 1000 / lat  # closed loop: every client waits >= one latency
        configs: dict[str, tuple[list[str], str, float, str | None]] = {
            "1 service": (f[:1], "least_in_flight", min(cap, bound), None),
            "2 services": (f[:2], "least_in_flight", min(2 * cap, bound), None),
            "4 services": (f[:4], "least_in_flight", min(4 * cap, bound), None),
            "3 + 1 slow, round_robin": (f[:3] + [slow.url], "round_robin",
                                        min(3 * cap + cap / 3, bound), slow.url),
            "3 + 1 slow, least_in_flight": (f[:3] + [slow.url], "least_in_flight",
                                            min(3 * cap + cap / 3, bound), slow.url),
        }  # fmt: skip
        rounds = Rounds(list(configs), args.repeats)
        for name in rounds:
            urls, selection, _, slow_url = configs[name]
            r = load(urls, selection, frames, args.clients, args.seconds, slow_url)
            rounds.record(name, r["req_s"], **r)
    finally:
        for svc in [*fast, slow]:
            svc.stop()
    base = rounds.median("1 service")
    rows = []
    for name, (_urls, selection, ideal, _slow) in configs.items():
        req_s = rounds.median(name)
        rows.append(
            [
                name,
                selection,
                req_s,
                ideal,
                req_s / ideal,
                req_s / base,
                rounds.extra_median(name, "p50_ms"),
                rounds.extra_median(name, "p99_ms"),
                rounds.extra_median(name, "share_slow"),
            ]
        )
    print_table(
        f"P5 EndpointPool over N loopback services (mock, {lat:.0f} ms per batch of <= 8, slow "
        f"one {3 * lat:.0f} ms, batch window {args.batch_window_ms:g} ms), "
        f"{args.clients} client threads",
        [
            "services",
            "selection",
            "req/s",
            "ideal req/s",
            "of ideal",
            "vs 1 service",
            "p50 ms",
            "p99 ms",
            "share slow",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
