"""P5 on Ray Serve: 1/2/4 replicas of a latency-bound mock, side by side with the launcher layout.

Three engines serve the same mock backend (sleeping ``--latency-ms`` per batch of up to 8 items,
so one server or replica answers at most ``8 / latency`` requests per second):

* ``launcher``: N reward-server processes on consecutive loopback ports behind one client-side
  :class:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool` (what ``evolve-reward-launch``
  starts);
* ``serve http``: one Ray Serve application with N replicas behind Serve's HTTP proxy, one URL;
* ``serve handle``: the same application called through a ``DeploymentHandle``
  (:class:`~evolve_envs.reward.clients.ray_handle_pool.RayHandlePool`, ``endpoint: ray://<app>``),
  no HTTP.

``--clients-per-replica K`` (default 16) threads per replica, ``K * N`` for N replicas (the same
offered load per replica at every N: 16 keeps one batch of 8 queued while another runs), call
``pairwise_critic`` on 64x64 frames in a closed loop for ``--seconds``; ``--clients-per-replica 0
--clients C`` uses C threads at every N instead. Rows report requests per second, the ratio
to the same engine with one replica (the target is >= 0.9 N), to the ideal ``N * 8 /
latency``, and the mean backend batch fill (critic items per backend call, from every server's
or replica's ``/metrics``). Configurations alternate in rounds; medians are reported. Ray
runs locally with 2 CPUs (replicas ask for 0.25 CPU each).

Run::

    .venv/bin/python bench/p5_ray_serve.py            # ~3 min
    .venv/bin/python bench/p5_ray_serve.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import socket
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
from _common import TASK, Rounds, closed_loop, machine_note, print_table, scene_frames

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

APP = "p5"


def batch_totals(urls: list[str], replicas: int) -> tuple[int, int]:
    """(backend calls, items) of the critic kind summed over `urls`' ``/metrics``; a Serve URL
    is asked until `replicas` distinct processes have answered."""
    count = items = 0
    for url in urls:
        seen: dict[int, dict[str, Any]] = {}
        for _ in range(100 * replicas):
            snap = httpx.get(url + "/metrics", timeout=10).json()
            seen[snap["process"]["pid"]] = snap
            if len(seen) == replicas:
                break
        for snap in seen.values():
            kind = snap["batches"]["by_kind"].get("critic", {"count": 0, "items": 0})
            count, items = count + kind["count"], items + kind["items"]
    return count, items


def load(make_pool: Callable[[], Any], frames: list[np.ndarray], clients: int,
         seconds: float) -> dict[str, float]:  # fmt: skip
    """Closed-loop load (:func:`_common.closed_loop`) from `clients` threads for `seconds`:
    requests/s and latency."""
    pool = make_pool()
    client = ProgressClient(pool, fail_on_request_error=True, max_workers=1)

    def make_call(i: int, stack: contextlib.ExitStack) -> Callable[[int], bool]:
        def call(k: int) -> bool:
            a, b = frames[k % len(frames)], frames[(k + 1) % len(frames)]
            return client.pairwise_critic(TASK, a, b).ok

        return call

    try:
        client.pairwise_critic(TASK, frames[0], frames[1])  # warm up connections / handle
        r = closed_loop(make_call, clients, seconds, settle_s=min(2.0, seconds / 2))
    finally:
        client.close()
        pool.close()
    return {"req_s": r.req_s, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--latency-ms", type=float, default=1000.0, help="backend latency per batch")
    p.add_argument("--clients", type=int, default=48)
    p.add_argument(
        "--clients-per-replica",
        type=int,
        default=16,
        help="client threads per replica (0: --clients threads at every replica count)",
    )
    p.add_argument("--seconds", type=float, default=5.0, help="duration of one measurement")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    p.add_argument("--batch-window-ms", type=float, default=50.0, help="the services' window")
    args = p.parse_args()
    if args.quick:
        args.latency_ms, args.clients, args.seconds, args.repeats = 100.0, 8, 1.0, 1
        args.clients_per_replica = 0
    sizes = [1, 2] if args.quick else [1, 2, 4]
    print(f"P5 (Ray Serve) on {machine_note()}", flush=True)

    import ray
    from ray import serve

    from evolve_envs.reward.service.hosting.ray_serve import build_app

    lat = args.latency_ms
    frames = scene_frames(8, 64, seed=4)
    kwargs = {"rule": "intensity", "latency_ms": lat}
    extra = ["--batch-window-ms", str(args.batch_window_ms)]
    services = [EmbeddedService("mock", kwargs, extra_args=extra) for _ in range(max(sizes))]
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2
    )
    deployed = {"n": 0}
    try:
        for svc in services:
            svc.start()
        with socket.socket() as sock:  # a free loopback port for Serve's proxy
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        serve.start(http_options={"host": "127.0.0.1", "port": port})

        def deploy(n: int) -> None:
            if deployed["n"] != n:
                app = build_app({"backend": "mock", "backend_kwargs": kwargs, "replicas": n,
                                 "num_cpus": 0.25, "batch_window_ms": args.batch_window_ms,
                                 "max_ongoing_requests": 256})  # fmt: skip
                serve.run(app, name=APP, route_prefix="/")
                deployed["n"] = n

        configs: dict[str, tuple[str, int]] = {}
        for n in sizes:
            for engine in ("launcher", "serve http", "serve handle"):
                configs[f"{engine}, {n}"] = (engine, n)
        rounds = Rounds(list(configs), args.repeats)
        for name in rounds:
            engine, n = configs[name]
            if engine == "launcher":
                urls = [s.url for s in services[:n]]
                metric_urls, per_url = urls, 1
                make = lambda urls=urls: EndpointPool(urls, timeout=60, max_retries=0)  # noqa: E731
            else:
                deploy(n)
                metric_urls, per_url = [f"http://127.0.0.1:{port}"], n
                if engine == "serve http":
                    url = f"http://127.0.0.1:{port}"
                    make = lambda url=url: EndpointPool([url], timeout=60, max_retries=0)  # noqa: E731
                else:
                    make = lambda: RayHandlePool("ray://" + APP, timeout=60, max_retries=0)  # noqa: E731
            clients = args.clients_per_replica * n if args.clients_per_replica else args.clients
            b0, i0 = batch_totals(metric_urls, per_url)
            r = load(make, frames, clients, args.seconds)
            b1, i1 = batch_totals(metric_urls, per_url)
            r["fill"] = (i1 - i0) / (b1 - b0) if b1 > b0 else float("nan")
            print(f"  {name}: {r['req_s']:.2f} req/s", flush=True)
            rounds.record(name, r["req_s"], **r)
    finally:
        for svc in services:
            svc.stop()
        serve.shutdown()
        ray.shutdown()
    rows = []
    for name, (engine, n) in configs.items():
        req_s = rounds.median(name)
        base = rounds.median(f"{engine}, 1")
        ideal = n * 8 * 1000 / lat
        p50, p99 = rounds.extra_median(name, "p50_ms"), rounds.extra_median(name, "p99_ms")
        fill = rounds.extra_median(name, "fill")
        clients = args.clients_per_replica * n if args.clients_per_replica else args.clients
        rows.append(
            [engine, n, clients, req_s, req_s / base, req_s / base / n, req_s / ideal, fill,
             p50, p99]
        )  # fmt: skip
    print_table(
        f"P5 Ray Serve vs launcher (mock, {lat:.0f} ms per batch of <= 8, batch window "
        f"{args.batch_window_ms:g} ms), closed-loop client threads",
        [
            "engine",
            "replicas",
            "clients",
            "req/s",
            "vs 1 replica",
            "scaling / N",
            "of ideal",
            "batch fill",
            "p50 ms",
            "p99 ms",
        ],  # fmt: skip
        rows,
    )


if __name__ == "__main__":
    main()
