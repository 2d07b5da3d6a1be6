"""D2: learner throughput with 1, 2 and 4 rollout workers.

The whole DistRL loop (:func:`evolve_envs.training.driver.run_train`: workers, queue, prioritized
replay, A-RIDE updates, weight broadcasts) on ``DistrlBench-v0`` (64² frames, 20 ms env step,
10-step episodes, no reward model) for a fixed window per worker count, in alternating rounds.
Reports the learner's samples/s (trajectories sampled into updates per second), updates/s, the
intake (env steps/s reaching the learner) and the mean policy-version staleness, from the second
half of each run (warm). The learner is not throttled by intake (``max_sample_ratio: null``), so
its samples/s shows what it keeps while more workers share the CPUs.

    python bench/d2_learner.py              # 2 rounds of 20 s runs
    python bench/d2_learner.py --quick      # 1 round of 6 s runs
"""

from __future__ import annotations

import argparse
import csv
import io
import tempfile
from pathlib import Path

from _common import Rounds, machine_note, median, print_table
from _distrl_env import ENV_ID, ray_env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    if args.quick:
        args.window, args.rounds = 6.0, 1

    import ray

    from evolve_envs.training.driver import TrainOptions, run_train

    base = {
        "env": {"id": ENV_ID, "length": 10, "size": 64, "step_delay_s": 0.02},
        "reward_model": {"enable": False},
        "workers": {"num_envs": 1, "num_cpus": 0.01},
        "policy": {"image_key": "agentview_image", "image_size": 32, "hidden": 32},
        "distrl": {"batch_size": 8, "min_buffer": 8, "max_sample_ratio": None},
        "run": {"log_every_s": args.window / 2, "checkpoint_every_s": 3600, "tensorboard": False},
    }
    names = [f"{n} workers" for n in args.workers]
    rounds = Rounds(names, repeats=args.rounds)
    ray.init(
        address="local",  # a new local Ray, never a cluster left running here
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=150 * 1024**2,
        runtime_env=ray_env(),
        log_to_driver=False,
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, name in enumerate(rounds):
                n = int(name.split()[0])
                run_dir = Path(tmp) / f"run{i}"
                run_train(
                    TrainOptions(
                        config=[base],
                        algo="distrl",
                        run_dir=run_dir,
                        minutes=args.window / 60,
                        overrides=[f"workers.num_workers={n}"],
                        progress_bar=False,
                        log=io.StringIO(),
                    )
                )
                with (run_dir / "metrics.csv").open() as fh:
                    rows = list(csv.DictReader(fh))
                warm = rows[1] if len(rows) > 1 else rows[-1]
                rounds.record(
                    name,
                    float(warm["samples_per_s"]),
                    updates=float(warm["updates_per_s"]),
                    intake=float(warm["env_steps_per_s"]),
                    stale=float(warm["staleness"] or "nan"),
                )
    finally:
        ray.shutdown()
    first = names[0]
    table = []
    for name in names:
        table.append(
            [
                name,
                rounds.median(name),
                rounds.ratio(name, first),
                rounds.extra_median(name, "updates"),
                rounds.extra_median(name, "intake"),
                median([e["stale"] for e in rounds.extra[name]]),
            ]
        )
    print_table(
        f"D2 learner throughput, batch 8 trajectories, {args.window:.0f} s runs, "
        f"{args.rounds} round(s), second half of each run. {machine_note()}",
        [
            "workers",
            "samples/s",
            f"ratio vs {first}",
            "updates/s",
            "intake env steps/s",
            "staleness",
        ],
        table,
    )


if __name__ == "__main__":
    main()
