"""P5 and D1 on a multi-node Ray cluster on this box, next to a single-node Ray, in one run.

The multi-node side is a real Ray cluster (``ray.cluster_utils.Cluster``: a head node and
worker nodes, each its own raylet, object store and GCS client, talking over the network
stack), started on this one machine. Every node shares the machine's cores, so this checks
placement (custom resources, ``spread``), cross-node object transfer and routing — not more
compute: the cluster's CPUs are counted per node and add up to more than the box has.

* **P5** (``--part p5``): bench/p5_ray_serve.py's closed-loop load on one Ray Serve application
  with 1, 2 and 4 replicas of the latency-bound mock, through Serve's HTTP proxy and through a
  ``DeploymentHandle``. Single-node: a local Ray with 2 CPUs. Multi-node: a head (1 CPU, Serve's
  controller and its one HTTP proxy, the driver) and four nodes marked ``reward`` (``{reward:
  1}``, 1 CPU each); each replica asks for ``{reward: 1}``, so N replicas land on N different
  nodes.
* **D1** (``--part d1``): bench/d1_collection.py's async-vs-barrier measurement. Single-node: a
  local Ray with 2 CPUs. Multi-node: a head (1 CPU; the weight registry, the queue and the
  driver) and two nodes marked ``sim`` (``{sim: 4}``, 1 CPU each); workers ask for ``{sim: 1}``
  with ``workers.scheduling: spread``, so they are spread over the two sim nodes and every
  trajectory crosses a node boundary to reach the queue.

The single-node and the multi-node measurements run one after the other in the same process
(one Ray at a time); the machine note printed with each table gives the load at that point.

    python bench/multinode.py                  # both parts, ~9 min
    python bench/multinode.py --part p5        # P5 only, ~5 min
    python bench/multinode.py --part d1 --speeds 1 1 3 --speeds 1 1 1 4
    python bench/multinode.py --quick          # smoke test
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _common import Rounds, machine_note, print_table, scene_frames
from _distrl_env import ray_env

MiB = 1024**2


@contextmanager
def single_node(**init: Any) -> Iterator[str]:
    """A new local Ray with 2 CPUs (never a cluster left running here)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=150 * MiB,
             log_to_driver=False, **init)  # fmt: skip
    try:
        yield "single node (2 CPUs)"
    finally:
        ray.shutdown()


@contextmanager
def multi_node(nodes: list[dict[str, Any]], **init: Any) -> Iterator[str]:
    """A head node (1 CPU) plus ``nodes`` (``add_node`` arguments), connected; shut down after."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "object_store_memory": 80 * MiB},
    )
    try:
        for spec in nodes:
            cluster.add_node(object_store_memory=80 * MiB, **spec)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, **init)
        try:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            yield f"{len(alive)}-node cluster (head + {len(nodes)})"
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


def _replica_nodes(app: str) -> int:
    """How many distinct nodes run the live replicas of Serve application ``app`` (from the GCS
    actor table: the state API needs a dashboard, which these Rays do not start)."""
    import ray

    actors = ray._private.state.actors().values()
    return len(
        {
            a["Address"]["NodeID"]
            for a in actors
            if a.get("State") == "ALIVE" and f"ServeReplica:{app}:" in a.get("ActorClassName", "")
        }
    )


def p5_rows(layout: str, args: argparse.Namespace, resources: dict[str, float] | None,
            sizes: list[int]) -> list[list[Any]]:  # fmt: skip
    """P5's Serve rows (HTTP and handle, ``sizes`` replicas) on the connected Ray."""
    from p5_ray_serve import APP, batch_totals, load
    from ray import serve

    from evolve_envs.reward.clients.endpoint_pool import EndpointPool
    from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool
    from evolve_envs.reward.service.hosting.ray_serve import build_app

    lat = args.latency_ms
    frames = scene_frames(8, 64, seed=4)
    kwargs = {"rule": "intensity", "latency_ms": lat}
    with socket.socket() as sock:  # a free loopback port for Serve's proxy
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # one proxy, on the head: every node of this cluster has the same IP address
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    url = f"http://127.0.0.1:{port}"
    placed: dict[int, int] = {}
    try:
        configs = {f"{e}, {n}": (e, n) for n in sizes for e in ("serve http", "serve handle")}
        rounds = Rounds(list(configs), args.repeats)
        deployed = 0
        for name in rounds:
            engine, n = configs[name]
            if deployed != n:
                spec = {"backend": "mock", "backend_kwargs": kwargs, "replicas": n,
                        "num_cpus": 0.25, "batch_window_ms": args.batch_window_ms,
                        "max_ongoing_requests": 256}  # fmt: skip
                if resources:
                    spec["resources"] = resources
                serve.run(build_app(spec), name=APP, route_prefix="/")
                deployed = n
                placed[n] = _replica_nodes(APP)
            if engine == "serve http":
                make = lambda: EndpointPool([url], timeout=60, max_retries=0)  # noqa: E731
            else:
                make = lambda: RayHandlePool("ray://" + APP, timeout=60, max_retries=0)  # noqa: E731
            clients = args.clients_per_replica * n
            b0, i0 = batch_totals([url], n)
            r = load(make, frames, clients, args.seconds)
            b1, i1 = batch_totals([url], n)
            r["fill"] = (i1 - i0) / (b1 - b0) if b1 > b0 else float("nan")
            print(f"  {layout}, {name}: {r['req_s']:.2f} req/s", flush=True)
            rounds.record(name, r["req_s"], **r)
    finally:
        serve.shutdown()
    rows = []
    for name, (engine, n) in configs.items():
        req_s = rounds.median(name)
        base = rounds.median(f"{engine}, 1")
        ideal = n * 8 * 1000 / lat
        p50, p99 = rounds.extra_median(name, "p50_ms"), rounds.extra_median(name, "p99_ms")
        rows.append([layout, engine, n, placed.get(n, "?"), n * args.clients_per_replica, req_s,
                     req_s / base / n, req_s / ideal, rounds.extra_median(name, "fill"),
                     p50, p99])  # fmt: skip
    return rows


def run_p5(args: argparse.Namespace) -> None:
    sizes = [1, 2] if args.quick else [1, 2, 4]
    rows: list[list[Any]] = []
    notes = []
    with single_node() as layout:
        rows += p5_rows(layout, args, None, sizes)
        notes.append(f"single node: {machine_note()}")
    reward_nodes = [{"num_cpus": 1, "resources": {"reward": 1}} for _ in range(max(sizes))]
    with multi_node(reward_nodes) as layout:
        rows += p5_rows(layout, args, {"reward": 1}, sizes)
        notes.append(f"cluster: {machine_note()}")
    print_table(
        f"P5 Ray Serve, single node vs multi-node cluster on one box (mock, {args.latency_ms:.0f}"
        f" ms per batch of <= 8, batch window {args.batch_window_ms:g} ms, "
        f"{args.clients_per_replica} closed-loop client threads per replica, {args.seconds:g} s "
        f"windows, {args.repeats} round(s)). " + "; ".join(notes),
        [
            "layout",
            "engine",
            "replicas",
            "replica nodes",
            "clients",
            "req/s",
            "scaling / N",
            "of ideal",
            "batch fill",
            "p50 ms",
            "p99 ms",
        ],  # fmt: skip
        rows,
    )


def run_d1(args: argparse.Namespace) -> None:
    from d1_collection import HEADERS, collection_config, ideal_ratio, measure

    mixes = args.speeds or [[1.0, 1.0, 3.0]]
    sim = {"resources": {"sim": 1}, "scheduling": "spread"}
    tables = []
    for speeds in mixes:
        ideal = ideal_ratio(speeds)
        rows: list[list[Any]] = []
        notes = []
        with single_node(runtime_env=ray_env()) as layout:
            cfg = collection_config(speeds, args.step_ms, args.length)
            got, nodes = measure(cfg, args.window, args.rounds, ideal)
            rows += [[layout, len(set(nodes)), *r] for r in got]
            notes.append(f"single node: {machine_note()}")
        sim_nodes = [{"num_cpus": 1, "resources": {"sim": 4}} for _ in range(2)]
        with multi_node(sim_nodes, runtime_env=ray_env()) as layout:
            cfg = collection_config(speeds, args.step_ms, args.length, workers=sim)
            got, nodes = measure(cfg, args.window, args.rounds, ideal)
            rows += [[layout, len(set(nodes)), *r] for r in got]
            notes.append(f"cluster: {machine_note()}")
        title = (
            f"D1 collection on a single node vs a multi-node cluster on one box, "
            f"{len(speeds)} workers at slowdowns {'/'.join(f'{x:g}x' for x in speeds)}, "
            f"{args.length}-step episodes, {args.step_ms:.0f} ms base step, {args.window:.0f} s "
            f"windows, {args.rounds} round(s); ideal async/barrier {ideal:.2f}. " + "; ".join(notes)
        )
        tables.append((title, rows))
    for title, rows in tables:
        print_table(title, ["layout", "worker nodes", *HEADERS], rows)
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["p5", "d1", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--latency-ms", type=float, default=1000.0, help="P5: backend latency")
    ap.add_argument("--clients-per-replica", type=int, default=16, help="P5: client threads")
    ap.add_argument("--seconds", type=float, default=5.0, help="P5: seconds per measurement")
    ap.add_argument("--repeats", type=int, default=1, help="P5: interleaved rounds per layout")
    ap.add_argument("--batch-window-ms", type=float, default=50.0, help="P5: services' window")
    ap.add_argument("--window", type=float, default=10.0, help="D1: seconds per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="D1: rounds per layout")
    ap.add_argument("--step-ms", type=float, default=50.0, help="D1: base env step time")
    ap.add_argument("--length", type=int, default=10, help="D1: steps per episode")
    ap.add_argument("--speeds", type=float, nargs="+", action="append",
                    help="D1: slowdowns, one worker each; repeat for several mixes")  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.latency_ms, args.clients_per_replica, args.seconds = 200.0, 4, 2.0
        args.window, args.rounds = 3.0, 1
    if args.part in ("p5", "both"):
        run_p5(args)
        print()
    if args.part in ("d1", "both"):
        run_d1(args)


if __name__ == "__main__":
    main()
