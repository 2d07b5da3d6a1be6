"""D3: learning curves on the synthetic ReachPlace task at equal wall-clock budgets.

Runs ``evolve-envs train`` three times with ``evolve_envs/configs/distrl/reach_place.yaml`` (rewards
from the embedded reward service, mock backend, the ``reach_place`` rule reading the rendered
scene):

* DistRL with prioritized replay (DPER, ``alpha`` from the config),
* DistRL with uniform replay (``learner.alpha=0``),
* GRPO (synchronous, same workers, policy and service),

each for ``--minutes`` of training, one after the other, and plots the environment's success rate
and the episode return against wall-clock time (``bench/results/d3_learning_curves.png``; each
run's ``metrics.csv`` is copied to ``bench/results/d3_<run>.csv``, the run directories stay under
``runs/d3/``). The table gives each run's first and last logged success rate and return.

    python bench/d3_learning_curves.py --minutes 15      # the full comparison (45 min)
    python bench/d3_learning_curves.py --minutes 5
    python bench/d3_learning_curves.py --quick           # 3 x 20 s, plumbing only
    python bench/d3_learning_curves.py --runs "DistRL prioritized" --keep   # redo one run
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import shutil
import time
from pathlib import Path

from _common import ROOT, machine_note, print_table
from _distrl_env import ray_env

RUNS = {
    "DistRL prioritized": ("distrl", []),
    "DistRL uniform": ("distrl", ["learner.alpha=0"]),
    "GRPO": ("grpo", []),
}


def _read(path: Path) -> list[dict[str, float]]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return [{k: float(v) if v not in ("", None) else math.nan for k, v in r.items()} for r in rows]


def _mean(rows: list[dict[str, float]], key: str) -> float:
    vals = [r[key] for r in rows if not math.isnan(r.get(key, math.nan))]
    return sum(vals) / len(vals) if vals else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--minutes", type=float, default=15.0, help="training budget per run")
    ap.add_argument(
        "--config", default=str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    ap.add_argument(
        "--keep",
        action="store_true",
        help="plot and tabulate the runs not run now from their saved bench/results CSVs",
    )
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = ap.parse_args()
    if args.quick:
        args.minutes = 1 / 3
    log_every = max(5.0, min(30.0, args.minutes * 60 / 20))

    import ray

    from evolve_envs.distrl.train import TrainOptions, run_train

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    curves: dict[str, list[dict[str, float]]] = {}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=150 * 1024**2,
        runtime_env=ray_env(),
        log_to_driver=False,
    )
    try:
        for name in args.runs:
            algo, extra = RUNS[name]
            slug = name.replace(" ", "_").lower()
            run_dir = ROOT / "runs" / "d3" / f"{stamp}-{slug}"
            run_train(
                TrainOptions(
                    config=[args.config],
                    algo=algo,
                    run_dir=run_dir,
                    minutes=args.minutes,
                    overrides=[*extra, f"run.log_every_s={log_every}", *args.overrides],
                    progress_bar=False,
                    log=io.StringIO(),
                )
            )
            curves[name] = _read(run_dir / "metrics.csv")
            shutil.copy(run_dir / "metrics.csv", out / f"d3_{slug}.csv")
    finally:
        ray.shutdown()
    if args.keep:  # earlier runs of the other configurations, in the table's usual order
        for name in RUNS:
            saved = out / f"d3_{name.replace(' ', '_').lower()}.csv"
            if name not in curves and saved.is_file():
                curves[name] = _read(saved)
        curves = {name: curves[name] for name in RUNS if name in curves}

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in curves.items():
        t = [r["time_s"] / 60 for r in rows]
        axes[0].plot(t, [r["success"] for r in rows], marker=".", label=name)
        axes[1].plot(t, [r["return"] for r in rows], marker=".", label=name)
    axes[0].set(xlabel="minutes", ylabel="env success rate", ylim=(-0.02, 1.02))
    axes[1].set(xlabel="minutes", ylabel="episode return (reward-service rewards)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"ReachPlace, {args.minutes:g} min per run, 2 CPUs (shared machine)")
    fig.tight_layout()
    png = out / "d3_learning_curves.png"
    fig.savefig(png, dpi=110)

    table = []
    for name, rows in curves.items():
        head, tail = rows[: max(1, len(rows) // 5)], rows[-max(1, len(rows) // 5) :]
        table.append(
            [
                name,
                _mean(head, "success"),
                _mean(tail, "success"),
                _mean(head, "return"),
                _mean(tail, "return"),
                sum(r["episodes"] for r in rows),
                rows[-1].get("updates_total", math.nan),
            ]
        )
    print_table(
        f"D3 learning curves, ReachPlace, {args.minutes:g} min per run (first / last fifth of "
        f"the logged intervals); plot {png.relative_to(ROOT)}. {machine_note()}",
        ["run", "success first", "success last", "return first", "return last", "episodes",
         "updates"],
        table,
    )  # fmt: skip


if __name__ == "__main__":
    main()
