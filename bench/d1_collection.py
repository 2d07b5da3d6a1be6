"""D1: collection throughput, asynchronous workers vs a synchronous barrier.

Three rollout workers (Ray actors, one env each, a small CNN policy acting) whose simulators step
at 1x, 1x and 3x the base step time (``time.sleep`` in the env, so the speeds hold on a loaded
machine). For the same wall-clock window:

* **async** — every worker runs :meth:`RolloutWorker.run` and pushes each episode to the queue
  as it finishes (DistRL); the driver drains the queue;
* **barrier** — every round each worker plays one episode (:meth:`collect_episodes`) and the
  round ends when the slowest is done (synchronous collection).

Reports episodes/s and env steps/s of both, their ratio, and the ratio over the ideal one,
measured in alternating rounds. The async rate counts work, not only whole episodes: per worker,
the env steps its :meth:`RolloutWorker.run` made over the call's wall time (submission to
answer), divided by the episode length — so the episode each worker has half played when its
window closes counts for the steps it made, just as the barrier divides its whole rounds by their
wall time. The plain count of episodes pushed inside the window (which drops those half-played
episodes: up to one episode per worker and window) is reported beside it.
With slowdowns ``s_i`` the ideal ratio is ``max(s) · Σ(1/s_i) / n``: for 1x/1x/3x
(1 + 1 + 1/3) / (3 · 1/3) = 2.33 (DistRL reports 2.4x), for 1x/1x/1x/4x 3.25.

    python bench/d1_collection.py                    # 3 rounds of 10 s windows, 1x/1x/3x
    python bench/d1_collection.py --speeds 1 1 1 4   # four workers, one 4x slower
    python bench/d1_collection.py --quick            # 1 round of 4 s

:func:`measure` is the measurement alone, on whatever Ray is connected (bench/multinode.py runs
it on a multi-node cluster).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import Rounds, machine_note, print_table
from _distrl_env import ENV_ID, ray_env


def collection_config(speeds: list[float], step_ms: float, length: int,
                      workers: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """The training config D1 runs: one worker per slowdown in ``speeds`` (``workers``: extra
    ``workers`` keys, e.g. resources and scheduling)."""
    from evolve_envs import load_train_config

    base = step_ms / 1000.0
    return load_train_config(
        {
            "env": {"id": ENV_ID, "length": length, "size": 64, "step_delay_s": base},
            "reward_model": {"enable": False},
            "workers": {
                "num_workers": len(speeds),
                "num_envs": 1,
                "num_cpus": 0.01,
                "env_overrides": [{"step_delay_s": base * s} for s in speeds],
                **(workers or {}),
            },
            "policy": {"image_key": "agentview_image", "image_size": 32, "hidden": 32},
        }
    )


def measure(cfg: Any, window: float, repeats: int, ideal: float) -> tuple[list[list[Any]], Any]:
    """Barrier and async collection with ``cfg``'s workers on the connected Ray, in alternating
    rounds: the table rows, and where the workers ran (node ids)."""
    import ray
    from ray.util.queue import Queue

    from evolve_envs.training.runtime.weight_registry import WeightRegistry
    from evolve_envs.training.worker_env import policy_from_config
    from evolve_envs.training.worker_start import start_workers

    registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
    queue = Queue(maxsize=1024, actor_options={"num_cpus": 0})
    workers = start_workers(cfg, registry, queue)
    try:
        spaces = ray.get(workers[0].ready.remote())
        nodes = [p["node_id"] for p in ray.get([w.placement.remote() for w in workers])]
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        weights = ray.put(policy.state_dict())
        registry.publish.remote(1, [weights])

        known = [0] * len(workers)  # each worker's env_steps counter as last seen

        def run_async() -> tuple[float, float, float]:
            t0 = time.monotonic()
            runs = [w.run.remote(max_seconds=window) for w in workers]
            ended: dict[Any, float] = {}
            episodes = 0

            def drain() -> None:
                nonlocal episodes
                n = queue.qsize()
                episodes += len(queue.get_nowait_batch(n)) if n else 0

            pending = list(runs)
            while pending:  # drain every 10 ms; note when each worker's run returns
                drain()
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.01)
                ended.update(dict.fromkeys(done, time.monotonic()))
            drain()  # pushed inside the window, still queued
            rate = 0.0  # env steps over each run's wall time, submission to answer
            for i, (ref, counts) in enumerate(zip(runs, ray.get(runs), strict=True)):
                rate += (counts["env_steps"] - known[i]) / (ended[ref] - t0)
                known[i] = counts["env_steps"]
            return rate / cfg.env["length"], episodes / window, rate

        def run_barrier() -> tuple[float, float, float]:
            episodes = steps = 0
            t0 = time.monotonic()
            seed = 0
            while time.monotonic() - t0 < window:
                calls = [w.collect_episodes.remote([seed + i], [weights], 1)
                         for i, w in enumerate(workers)]  # fmt: skip
                for i, chunk in enumerate(ray.get(calls)):
                    episodes += len(chunk)
                    steps += sum(len(t) for t in chunk)
                    known[i] += sum(len(t) for t in chunk)
                seed += len(workers)
            wall = time.monotonic() - t0
            return episodes / wall, episodes / wall, steps / wall

        run_barrier()  # warm-up: first inference, first resets
        rounds = Rounds(["barrier", "async"], repeats=repeats)
        for name in rounds:
            eps, in_window, sps = run_async() if name == "async" else run_barrier()
            rounds.record(name, 1.0 / max(eps, 1e-9), in_window=in_window, sps=sps)
        rows = []
        for name in ("barrier", "async"):
            eps = 1.0 / rounds.median(name)
            ratio = rounds.ratio("barrier", name)  # barrier s/episode over this one's
            in_window = rounds.extra_median(name, "in_window")
            sps = rounds.extra_median(name, "sps")
            ideal_col = ratio / ideal if name == "async" else "–"
            rows.append([name, eps, in_window, sps, ratio, ideal_col])
        return rows, nodes
    finally:
        for w in workers:
            ray.kill(w, no_restart=True)
        ray.kill(registry)
        queue.shutdown()


HEADERS = ["collection", "episodes/s", "pushed in window /s", "env steps/s", "ratio vs barrier",
           "measured / ideal"]  # fmt: skip


def ideal_ratio(speeds: list[float]) -> float:
    """``max(s) · Σ(1/s_i) / n``."""
    return max(speeds) * sum(1.0 / x for x in speeds) / len(speeds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--window", type=float, default=10.0, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=50.0, help="base env step time")
    ap.add_argument("--length", type=int, default=10, help="steps per episode")
    ap.add_argument("--speeds", type=float, nargs="+", action="append",
                    help="each worker's slowdown factor (one worker each); repeat the option "
                         "for several mixes in one run (default 1 1 3)")  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.window, args.rounds = 4.0, 1
    mixes = args.speeds or [[1.0, 1.0, 3.0]]

    import ray

    ray.init(
        address="local",  # a new local Ray, never a cluster left running here
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=150 * 1024**2,
        runtime_env=ray_env(),
        log_to_driver=False,
    )
    tables = []
    try:
        for speeds in mixes:
            ideal = ideal_ratio(speeds)
            cfg = collection_config(speeds, args.step_ms, args.length)
            rows, _ = measure(cfg, args.window, args.rounds, ideal)
            title = (
                f"D1 collection, {len(speeds)} workers at slowdowns "
                f"{'/'.join(f'{x:g}x' for x in speeds)}, {args.length}-step episodes, "
                f"{args.step_ms:.0f} ms base step, {args.window:.0f} s windows, "
                f"{args.rounds} round(s); ideal async/barrier {ideal:.2f}. {machine_note()}"
            )
            tables.append((title, rows))
    finally:
        ray.shutdown()
    for title, rows in tables:
        print_table(title, HEADERS, rows)
        print()


if __name__ == "__main__":
    main()
