"""D3: learning on the synthetic ReachPlace task, DistRL (prioritized, uniform) vs GRPO.

Protocol (every flag has the full-size default; ``--short`` is the CPU-box version):

* the same env, reward (``evolve_envs/configs/distrl/reach_place.yaml``: embedded reward
  service, mock backend, ``reach_place`` rule), policy, worker count and wall-clock budget for
  every run;
* ``--seeds N`` seeds per algorithm, run *interleaved* (seed 0 of every algorithm, then seed 1,
  ...; the order of the algorithms rotates with the seed), one run at a time;
* every ``--snapshot-every-s`` the training loop saves the policy (``run.snapshot_every_s``);
  after each run every snapshot is evaluated on ``--eval-episodes`` fixed **held-out** scenes
  (reset seeds ``2**31 + k``, which training never draws), deterministic policy (its mean
  action), success = the env's ``is_success`` flag (never the reward model);
* reported per algorithm, as mean over seeds with a 95 % Student-t interval: final held-out
  success, area under the held-out success curve (mean success over the budget), time to
  30 % / 50 % held-out success (seeds that never get there counted), and the held-out success at
  **equal env steps** (the fewest env steps any run collected); mean curves with 95 % bands
  against minutes and against env steps (``bench/results/d3_learning_curves.png``).

    python bench/d3_learning_curves.py                            # 5 seeds x 15 min x 3 (~4 h)
    python bench/d3_learning_curves.py --seeds 3 --minutes 3.5 --snapshot-every-s 20  # short
    python bench/d3_learning_curves.py --report-only              # re-plot saved results

Per run: ``runs/d3/<stamp>/<algo>-s<seed>/`` (metrics.csv, snapshots/), and the evaluated curve
``<out>/d3/<algo>-s<seed>.json`` (with the run's last-minute training numbers, so a report can be
made from the records alone; ``--first-seed`` adds seeds to a partial set later).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np
from _common import ROOT, LoadLog, load_summary, machine_note, print_table
from _distrl_env import ray_env

ALGOS = {
    "DistRL prioritized": ("distrl", []),
    "DistRL uniform": ("distrl", ["distrl.alpha=0"]),
    "GRPO": ("grpo", []),
}


def slug(name: str) -> str:
    return name.replace(" ", "_").lower()


def t95(n: int) -> float:
    """Two-sided 95 % Student-t critical value for ``n`` samples."""
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else math.nan


def mean_ci(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % t interval); NaN half-width for one value."""
    arr = np.asarray([v for v in values if np.isfinite(v)], dtype=np.float64)
    if arr.size == 0:
        return math.nan, math.nan
    if arr.size == 1:
        return float(arr[0]), math.nan
    return float(arr.mean()), t95(arr.size) * float(arr.std(ddof=1)) / math.sqrt(arr.size)


def snapshots(run_dir: Path) -> list[Path]:
    """A run's policy snapshots in time order."""
    return sorted((run_dir / "snapshots").glob("*.pt"), key=lambda p: p.stem.split("-")[1])


def evaluate_run(run_dir: Path, episodes: int, offset: int = 0) -> list[dict[str, float]]:
    """Held-out success of every snapshot of a run, in time order (the library's held-out
    evaluation, as `evolve-envs evaluate` and the training loop's `eval` run it; scenes
    ``held_out_seeds(episodes, offset)``)."""
    from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds, read_saved

    snaps = snapshots(run_dir)
    if not snaps:
        return []
    seeds = held_out_seeds(episodes, offset)
    curve = []
    with HeldOutEvaluator(read_saved(snaps[0]).cfg) as evaluator:
        policy = evaluator.policy()
        for path in snaps:
            snap = read_saved(path).payload
            policy.load_state_dict(snap["policy"])
            res = evaluator.run(policy, seeds)
            curve.append(
                {
                    "time_s": float(snap["time_s"]),
                    "env_steps": float(snap["counters"].get("env_steps_in", math.nan)),
                    "updates": float(snap["counters"]["updates"]),
                    "success": res.success_rate,
                }
            )
    curve.sort(key=lambda r: r["time_s"])
    return curve


def final_sampled(run_dir: Path, episodes: int, seed: int, offset: int = 0) -> float:
    """Held-out success of a run's last snapshot with *sampled* actions (as the workers act; a
    torch RNG seeded with ``seed``), beside the protocol's mean-action number."""
    from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds, read_saved

    snaps = snapshots(run_dir)
    if not snaps:
        return math.nan
    last = read_saved(snaps[-1])
    with HeldOutEvaluator(last.cfg) as evaluator:
        policy = evaluator.policy(last.payload["policy"])
        res = evaluator.run(policy, held_out_seeds(episodes, offset), deterministic=False,
                            sample_seed=seed)  # fmt: skip
    return res.success_rate


def last_minute(metrics_csv: Path) -> tuple[float, float]:
    """Training episodes' mean return and env success over the run's last minute (episode-
    weighted, from ``metrics.csv``; the stochastic policy on training scenes)."""
    import csv

    if not metrics_csv.is_file():
        return math.nan, math.nan
    with metrics_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return math.nan, math.nan
    end = float(rows[-1]["time_s"])
    ret = succ = n = 0.0
    for r in rows:
        k = float(r["episodes"] or 0)
        if float(r["time_s"]) >= end - 60 and k and r["return"] not in ("", "nan"):
            ret, succ, n = ret + k * float(r["return"]), succ + k * float(r["success"]), n + k
    return (ret / n, succ / n) if n else (math.nan, math.nan)


def at(curve: list[dict[str, float]], key: str, x: float) -> float:
    """Held-out success of the last snapshot with ``key <= x`` (step interpolation)."""
    val = math.nan
    for r in curve:
        if r[key] <= x + 1e-9:
            val = r["success"]
    return val


def time_to(curve: list[dict[str, float]], level: float) -> float:
    """Minutes until held-out success first reaches ``level`` (inf if never)."""
    for r in curve:
        if r["success"] >= level:
            return r["time_s"] / 60
    return math.inf


def auc(curve: list[dict[str, float]], seconds: float) -> float:
    """Mean held-out success over ``[0, seconds]`` (step function between snapshots)."""
    if not curve:
        return math.nan
    grid = np.linspace(0, seconds, 200)
    return float(np.mean([at(curve, "time_s", g) if g >= curve[0]["time_s"] else 0.0
                          for g in grid]))  # fmt: skip


def paired_differences(records: dict[str, dict[int, dict[str, float]]]) -> list[list[str]]:
    """For each pair of algorithms, the per-seed difference (first − second) of each metric over
    the seeds both ran, mean ± 95 % t-interval: seeds are paired (run back to back, same scenes)."""
    rows = []
    names = [n for n in records if records[n]]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            seeds = sorted(set(records[a]) & set(records[b]))
            if len(seeds) < 2:
                continue
            row = [f"{a} − {b}", str(len(seeds))]
            for key in ("final", "auc", "equal_steps"):
                m, h = mean_ci([records[a][s][key] - records[b][s][key] for s in seeds])
                row.append(f"{m:+.3f} ± {h:.3f}" if np.isfinite(h) else "-")
            wins = sum(records[a][s]["final"] > records[b][s]["final"] for s in seeds)
            row.append(f"{wins}/{len(seeds)}")
            rows.append(row)
    return rows


def train_one(cfg_path: str, name: str, seed: int, minutes: float, snap_s: float, stamp: str,
              extra: list[str]) -> Path:  # fmt: skip
    from evolve_envs.training.driver import TrainOptions, run_train

    algo, overrides = ALGOS[name]
    run_dir = ROOT / "runs" / "d3" / stamp / f"{slug(name)}-s{seed}"
    run_train(
        TrainOptions(
            config=[cfg_path],
            algo=algo,
            run_dir=run_dir,
            minutes=minutes,
            overrides=[
                *overrides,
                f"run.seed={seed}",
                f"run.snapshot_every_s={snap_s}",
                f"run.log_every_s={max(5.0, min(30.0, minutes * 3))}",
                "run.tensorboard=false",
                *extra,
            ],
            progress_bar=False,
            log=io.StringIO(),
        )
    )
    return run_dir


def report(out: Path, names: list[str], minutes: float, episodes: int, note: str) -> None:
    """Aggregate the saved curves: the table, a markdown copy and the plot."""
    curves: dict[str, list[list[dict[str, float]]]] = {}
    train: dict[str, list[tuple[float, float]]] = {}
    seeds: dict[str, list[int]] = {}
    sampled: dict[str, list[float]] = {}
    for name in names:
        records = [
            json.loads(f.read_text()) for f in sorted((out / "d3").glob(f"{slug(name)}-s*.json"))
        ]
        records.sort(key=lambda r: r["seed"])
        records = [r for r in records if r["curve"]]
        curves[name] = [r["curve"] for r in records]
        seeds[name] = [int(r["seed"]) for r in records]
        sampled[name] = [float(r.get("final_sampled", math.nan)) for r in records]
        train[name] = [
            tuple(r["train_last_minute"]) if "train_last_minute" in r
            else last_minute(ROOT / r["run_dir"] / "metrics.csv")
            for r in records
        ]  # fmt: skip
    runs = [c for cs in curves.values() for c in cs]
    if not runs:
        print("no evaluated runs")
        return
    seconds = minutes * 60
    equal_steps = min(c[-1]["env_steps"] for c in runs)
    headers = ["algorithm", "seeds", "final success", "AUC", "min to 30 %", "min to 50 %",
               f"success @ {equal_steps / 1000:.0f}k env steps", "env steps (k)",
               "train return, last min", "train success, last min",
               "final success, sampled actions"]  # fmt: skip
    rows, md = [], []

    def fmt(m: float, h: float) -> str:
        if not np.isfinite(m):
            return "-"
        return f"{m:.3f} ± {h:.3f}" if np.isfinite(h) else f"{m:.3f}"

    def fmt_time(values: list[float]) -> str:
        reached = [v for v in values if np.isfinite(v)]
        if not reached:
            return f"never (0/{len(values)})"
        return f"{np.mean(reached):.1f} ({len(reached)}/{len(values)})"

    for name, cs in curves.items():
        if not cs:
            continue
        final = mean_ci([c[-1]["success"] for c in cs])
        area = mean_ci([auc(c, seconds) for c in cs])
        eq = mean_ci([at(c, "env_steps", equal_steps) for c in cs])
        steps = np.mean([c[-1]["env_steps"] for c in cs]) / 1000
        ret = mean_ci([r for r, _ in train[name]])
        succ = mean_ci([x for _, x in train[name]])
        row = [name, len(cs), fmt(*final), fmt(*area), fmt_time([time_to(c, 0.3) for c in cs]),
               fmt_time([time_to(c, 0.5) for c in cs]), fmt(*eq), f"{steps:.0f}", fmt(*ret),
               fmt(*succ)]  # fmt: skip
        have = [v for v in sampled[name] if np.isfinite(v)]
        row.append(
            fmt(*mean_ci(have)) + ("" if len(have) == len(cs) else f" ({len(have)}/{len(cs)})")
        )
        rows.append(row)
        md.append("| " + " | ".join(str(x) for x in row) + " |")
    title = (f"D3 held-out success ({episodes} fixed scenes, deterministic policy), "
             f"{minutes:g} min per run, mean ± 95 % t-interval over seeds. {note}")  # fmt: skip
    print_table(title, headers, rows)
    table = "| " + " | ".join(headers) + " |\n|" + "---|" * len(headers) + "\n" + "\n".join(md)
    per_seed = {
        name: {
            s: {
                "final": c[-1]["success"],
                "auc": auc(c, seconds),
                "equal_steps": at(c, "env_steps", equal_steps),
            }
            for s, c in zip(seeds[name], cs, strict=True)
        }
        for name, cs in curves.items()
    }
    lines = ["Final held-out success per seed:"]
    for name, by_seed in per_seed.items():
        finals = ", ".join(f"s{s} {v['final']:.2f}" for s, v in by_seed.items())
        lines.append(f"- {name}: {finals}")
    text = "\n".join(lines)
    print("\n" + text + "\n")
    steps_col = f"success @ {equal_steps / 1000:.0f}k env steps"
    pair_headers = ["difference (paired by seed)", "seeds", "final success", "AUC", steps_col,
                    "seeds first ahead"]  # fmt: skip
    pairs = paired_differences(per_seed)
    pair_md = ""
    if pairs:
        pair_title = "Paired differences, mean ± 95 % t-interval over the seeds both ran"
        print_table(pair_title, pair_headers, pairs)
        pair_md = (f"\n{pair_title}\n\n| " + " | ".join(pair_headers) + " |\n|"
                   + "---|" * len(pair_headers) + "\n"
                   + "\n".join("| " + " | ".join(r) + " |" for r in pairs) + "\n")  # fmt: skip
    (out / "d3_summary.md").write_text(f"{title}\n\n{table}\n\n{text}\n{pair_md}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    # the last snapshot lands a fraction of a second past the budget: end the grid on it
    grid_t = np.linspace(0, max(seconds, max(c[-1]["time_s"] for c in runs)), 60)
    max_steps = max(c[-1]["env_steps"] for c in runs)
    grid_s = np.linspace(0, max_steps, 60)
    for name, cs in curves.items():
        if not cs:
            continue
        for ax, key, grid, scale in ((axes[0], "time_s", grid_t, 60.0),
                                     (axes[1], "env_steps", grid_s, 1000.0)):  # fmt: skip
            ys = np.array([[at(c, key, g) for g in grid] for c in cs], dtype=np.float64)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # grid points before a snapshot
                m = np.nanmean(ys, axis=0)
                sd = np.nanstd(ys, axis=0, ddof=1) if len(cs) > 1 else np.zeros_like(m)
            n = np.sum(np.isfinite(ys), axis=0)
            half = np.array([t95(k) if k > 1 else 0.0 for k in n]) * sd / np.sqrt(np.maximum(n, 1))
            (line,) = ax.plot(grid / scale, m, label=f"{name} (n={len(cs)})")
            ax.fill_between(grid / scale, m - half, m + half, alpha=0.2, color=line.get_color())
    axes[0].set(xlabel="minutes", ylabel=f"held-out success ({episodes} scenes)", ylim=(-0.02, 1))
    axes[1].set(xlabel="env steps (thousands)", ylim=(-0.02, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"ReachPlace, {minutes:g} min per run, mean and 95 % band over seeds")
    fig.tight_layout()
    png = out / "d3_learning_curves.png"
    fig.savefig(png, dpi=110)
    print(f"plot: {png}; table: {out / 'd3_summary.md'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="training budget per run")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per algorithm")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=50, help="held-out scenes per snapshot")
    ap.add_argument("--snapshot-every-s", type=float, default=60.0)
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    ap.add_argument(
        "--config", default=str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--report-only", action="store_true", help="aggregate saved curves only")
    ap.add_argument(
        "--backfill-sampled",
        action="store_true",
        help="add the sampled-action final success to saved records whose run directory is here",
    )
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = ap.parse_args()
    out = Path(args.out)
    (out / "d3").mkdir(parents=True, exist_ok=True)
    if args.backfill_sampled:
        for f in sorted((out / "d3").glob("*.json")):
            rec = json.loads(f.read_text())
            if "final_sampled" not in rec and (ROOT / rec["run_dir"] / "snapshots").is_dir():
                rec["final_sampled"] = final_sampled(ROOT / rec["run_dir"], args.eval_episodes,
                                                     int(rec["seed"]))  # fmt: skip
                f.write_text(json.dumps(rec))
                print(f"{f.name}: sampled-action final success {rec['final_sampled']:.3f}")
    if not args.report_only:
        import ray

        stamp = time.strftime("%Y%m%d-%H%M%S")
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 object_store_memory=150 * 1024**2, runtime_env=ray_env(),
                 log_to_driver=False)  # fmt: skip
        try:
            with LoadLog(out / "load.log"):  # the load beside the runs
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    k = seed % len(args.algos)
                    for name in args.algos[k:] + args.algos[:k]:  # the order rotates with the seed
                        t0 = time.monotonic()
                        run_dir = train_one(args.config, name, seed, args.minutes,
                                            args.snapshot_every_s, stamp,
                                            args.overrides)  # fmt: skip
                        curve = evaluate_run(run_dir, args.eval_episodes)
                        record = {
                            "algo": name,
                            "seed": seed,
                            "minutes": args.minutes,
                            "run_dir": str(run_dir.relative_to(ROOT)),
                            "curve": curve,
                            # kept in the record: runs/ is not part of the checkout
                            "train_last_minute": last_minute(run_dir / "metrics.csv"),
                            "final_sampled": final_sampled(run_dir, args.eval_episodes, seed),
                        }
                        (out / "d3" / f"{slug(name)}-s{seed}.json").write_text(json.dumps(record))
                        last = curve[-1]["success"] if curve else math.nan
                        took = time.monotonic() - t0
                        print(f"{name} seed {seed}: held-out success {last:.3f} ({took:.0f} s with "
                              "evaluation)", flush=True)  # fmt: skip
        finally:
            ray.shutdown()
    # the load over all the runs (load.log), not only at the moment of the report
    note = machine_note(load_summary(out / "load.log"))
    report(out, args.algos, args.minutes, args.eval_episodes, note)


if __name__ == "__main__":
    main()
