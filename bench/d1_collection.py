"""D1: collection throughput, asynchronous workers vs a synchronous barrier.

Three rollout workers (Ray actors, one env each, a small CNN policy acting) whose simulators step
at 1x, 1x and 3x the base step time (``time.sleep`` in the env, so the speeds hold on a loaded
machine). For the same wall-clock window:

* **async** — every worker runs :meth:`RolloutWorker.run` and pushes each episode to the queue
  as it finishes (DistRL); the driver drains the queue;
* **barrier** — every round each worker plays one episode (:meth:`collect_episodes`) and the
  round ends when the slowest is done (synchronous collection).

Reports episodes/s and env steps/s of both, their ratio, and the ratio over the ideal one,
measured in alternating rounds. With slowdowns ``s_i`` the ideal ratio is
``max(s) · Σ(1/s_i) / n``: for 1x/1x/3x (1 + 1 + 1/3) / (3 · 1/3) = 2.33 (DistRL reports 2.4x),
for 1x/1x/1x/4x 3.25.

    python bench/d1_collection.py                    # 3 rounds of 10 s windows, 1x/1x/3x
    python bench/d1_collection.py --speeds 1 1 1 4   # four workers, one 4x slower
    python bench/d1_collection.py --quick            # 1 round of 4 s
"""

from __future__ import annotations

import argparse
import time

from _common import Rounds, machine_note, print_table
from _distrl_env import ENV_ID, ray_env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--window", type=float, default=10.0, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=50.0, help="base env step time")
    ap.add_argument("--length", type=int, default=10, help="steps per episode")
    ap.add_argument("--speeds", type=float, nargs="+", default=[1.0, 1.0, 3.0],
                    help="each worker's slowdown factor (one worker each)")  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.window, args.rounds = 4.0, 1

    import ray
    from ray.util.queue import Queue

    from evolve_envs.distrl.config import load_train_config
    from evolve_envs.distrl.worker import WeightRegistry, policy_from_config, start_workers

    base = args.step_ms / 1000.0
    speeds = list(args.speeds)
    ideal = max(speeds) * sum(1.0 / x for x in speeds) / len(speeds)
    cfg = load_train_config(
        {
            "env": {"id": ENV_ID, "length": args.length, "size": 64, "step_delay_s": base},
            "reward_model": {"enable": False},
            "workers": {
                "num_workers": len(speeds),
                "num_envs": 1,
                "num_cpus": 0.01,
                "env_overrides": [{"step_delay_s": base * s} for s in speeds],
            },
            "policy": {"image_key": "agentview_image", "image_size": 32, "hidden": 32},
        }
    )
    ray.init(
        address="local",  # a new local Ray, never a cluster left running here
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=150 * 1024**2,
        runtime_env=ray_env(),
        log_to_driver=False,
    )
    try:
        registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
        queue = Queue(maxsize=1024, actor_options={"num_cpus": 0})
        workers = start_workers(cfg, registry, queue)
        spaces = ray.get(workers[0].ready.remote())
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        weights = ray.put(policy.state_dict())
        registry.publish.remote(1, [weights])

        def run_async() -> tuple[float, float]:
            runs = [w.run.remote(max_seconds=args.window) for w in workers]
            episodes = steps = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.window:
                n = queue.qsize()
                for t in queue.get_nowait_batch(n) if n else []:
                    episodes, steps = episodes + 1, steps + len(t)
                time.sleep(0.01)
            ray.get(runs)
            n = queue.qsize()  # pushed inside the window, still queued
            for t in queue.get_nowait_batch(n) if n else []:
                episodes, steps = episodes + 1, steps + len(t)
            return episodes / args.window, steps / args.window

        def run_barrier() -> tuple[float, float]:
            episodes = steps = 0
            t0 = time.monotonic()
            seed = 0
            while time.monotonic() - t0 < args.window:
                calls = [w.collect_episodes.remote([seed + i], [weights], 1)
                         for i, w in enumerate(workers)]  # fmt: skip
                for chunk in ray.get(calls):
                    episodes += len(chunk)
                    steps += sum(len(t) for t in chunk)
                seed += len(workers)
            wall = time.monotonic() - t0
            return episodes / wall, steps / wall

        run_barrier()  # warm-up: first inference, first resets
        rounds = Rounds(["barrier", "async"], repeats=args.rounds)
        steps_per_s: dict[str, list[float]] = {"barrier": [], "async": []}
        for name in rounds:
            eps, sps = run_async() if name == "async" else run_barrier()
            rounds.record(name, 1.0 / max(eps, 1e-9))  # seconds per episode
            steps_per_s[name].append(sps)
        rows = []
        for name in ("barrier", "async"):
            eps = 1.0 / rounds.median(name)
            ratio = rounds.ratio("barrier", name)  # barrier s/episode over this one's
            sps = sum(steps_per_s[name]) / len(steps_per_s[name])
            rows.append([name, eps, sps, ratio, ratio / ideal if name == "async" else "–"])
        for w in workers:
            ray.kill(w, no_restart=True)
    finally:
        ray.shutdown()
    print_table(
        f"D1 collection, {len(speeds)} workers at slowdowns "
        f"{'/'.join(f'{x:g}x' for x in speeds)}, {args.length}-step episodes, "
        f"{args.step_ms:.0f} ms base step, {args.window:.0f} s windows, {args.rounds} round(s); "
        f"ideal async/barrier {ideal:.2f}. {machine_note()}",
        ["collection", "episodes/s", "env steps/s", "ratio vs barrier", "measured / ideal"],
        rows,
    )


if __name__ == "__main__":
    main()
