"""D3 (race): the two blocks of reach_place_tuned.yaml on fresh seeds, instant or slow model.

Both arms train from one config, ``evolve_envs/configs/distrl/reach_place_tuned.yaml`` (the
``distrl`` block for DistRL prioritized, the ``grpo`` block for GRPO; ``bench/d3_tune.py``
writes both, each arm tuned with the same budget), on seeds never used in tuning:

* ``--regime instant``: the config as shipped (embedded mock reward model, instant answers,
  2 equal workers);
* ``--regime slow``: DistRL's own regime: the mock sleeps ``--latency-ms`` per backend batch
  (reward calls as shipped: ``deferred`` now, ``async`` in the recorded D3 runs) and three
  workers run at ``--speeds`` (1x/1x/3x)
  of a ``--step-ms`` simulator step (``workers.step_delay_s``).

Seeds run interleaved (seed ``k`` of every arm, the order rotating with ``k``), one run at a
time, ``--minutes`` each. Every ``--snapshot-every-s`` the loop saves the policy; after each run
every snapshot is scored on D3's ``--eval-episodes`` (50) held-out scenes (reset seeds
``2**31 + k``: training never draws them, tuning scored other ones) with the env's success flag:
mean action for the curve, sampled actions too for the last snapshot. Reported per arm: final
success (mean and sampled action), area under the held-out curve (AUC), minutes to 30 % / 50 %,
success at equal env steps (the fewest any run collected), each with a 95 % percentile
bootstrap interval over seeds (seeded); per pair of arms the paired differences with bootstrap
intervals and the exact sign-flip p-value (all ``2**n`` sign patterns), and the ratio of env
steps each collected in the same minutes (sign-flip on its log). The machine's load is
logged during each run and its range reported.

    python bench/d3_race.py --seeds 2 --first-seed 100              # instant, part 1 of 3
    python bench/d3_race.py --regime slow --seeds 2 --first-seed 200  # slow, part 1 of 2
    python bench/d3_race.py --report-only                            # re-render from records

Records: ``<out>/runs/<arm>-s<seed>.json`` (one per run; a seed already recorded is skipped, so
parts append), the table ``<out>/d3_race_summary.md`` and the plot ``<out>/d3_race.png``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, machine_note, md_table, print_table
from _d3_runs import (
    REGIMES,
    TUNED_CONFIG,
    config_label,
    is_tuned,
    load_range,
    ray_init,
    read_records,
    regime_overrides,
    run_and_evaluate,
    write_json,
)
from _stats import bootstrap_ci, sign_flip_p
from d3_learning_curves import at, auc, slug, time_to

ARMS = {"DistRL prioritized": "distrl", "GRPO": "grpo"}
#: Paired metrics: record key -> column title.
METRICS = {
    "final": "final success (mean action)",
    "final_sampled": "final success (sampled actions)",
    "auc": "AUC",
    "equal_steps": "success @ equal env steps",
}
DEFAULTS = {  # per regime: seeds, first seed, output folder
    "instant": (6, 100, ROOT / "bench" / "results" / "d3_race"),
    "slow": (4, 200, ROOT / "bench" / "results" / "d3_race_slow"),
}


def run_metrics(rec: dict[str, Any], equal_steps: float) -> dict[str, float]:
    """One run's numbers from its record."""
    curve = rec["curve"]
    return {
        "final": curve[-1]["success"],
        "final_sampled": float(rec.get("final_sampled", math.nan)),
        "auc": auc(curve, rec["minutes"] * 60),
        "equal_steps": at(curve, "env_steps", equal_steps),
        "t30": time_to(curve, 0.3),
        "t50": time_to(curve, 0.5),
        "env_steps": curve[-1]["env_steps"],
        "train_success": float(rec.get("train_last_minute", [math.nan, math.nan])[1]),
    }


def fmt_ci(values: list[float], seed: int) -> str:
    have = [v for v in values if np.isfinite(v)]
    if not have:
        return "-"
    lo, hi = bootstrap_ci(have, seed=seed)
    more = "" if len(have) == len(values) else f" ({len(have)}/{len(values)})"
    return f"{np.mean(have):.3f} [{lo:.3f}, {hi:.3f}]{more}"


def fmt_time(values: list[float]) -> str:
    reached = [v for v in values if np.isfinite(v)]
    if not reached:
        return f"never (0/{len(values)})"
    return f"{np.mean(reached):.1f} ({len(reached)}/{len(values)})"


def report(out: Path) -> str:
    """Aggregate ``out/runs/*.json`` into the tables, ``d3_race_summary.md`` and the plot;
    returns the markdown."""
    records = [r for r in read_records(out / "runs") if r.get("curve")]
    if not records:
        print(f"no records in {out / 'runs'}")
        return ""
    arms = sorted({r["arm"] for r in records}, key=lambda a: list(ARMS).index(a)
                  if a in ARMS else len(ARMS))  # fmt: skip
    equal = min(r["curve"][-1]["env_steps"] for r in records)
    by_arm: dict[str, dict[int, dict[str, float]]] = {a: {} for a in arms}
    for r in records:
        by_arm[r["arm"]][int(r["seed"])] = run_metrics(r, equal)
    regimes = sorted({r["regime"] for r in records})
    minutes = sorted({r["minutes"] for r in records})
    tuned = all(r.get("tuned", False) for r in records)
    lines = [
        f"D3 (race), regime {'/'.join(regimes)}, {'/'.join(f'{m:g}' for m in minutes)} min "
        f"per run, held-out success on {records[0]['eval_episodes']} fixed scenes (env success "
        f"flag); mean over seeds [95 % bootstrap interval]. Config "
        f"{records[0]['config']}{'' if tuned else ' (NOT TUNED: placeholder blocks)'}; "
        f"overrides {records[0]['overrides'] or 'none'}. " + machine_note(load_range(records)),
        "",
    ]
    headers = ["arm", "seeds", *METRICS.values(), "min to 30 %", "min to 50 %",
               "env steps (k)", "train success, last min"]  # fmt: skip
    headers[5] = f"success @ {equal / 1000:.1f}k env steps"
    rows = []
    for i, arm in enumerate(arms):
        ms = list(by_arm[arm].values())
        rows.append([arm, str(len(ms)),
                     *[fmt_ci([m[k] for m in ms], seed=i) for k in METRICS],
                     fmt_time([m["t30"] for m in ms]), fmt_time([m["t50"] for m in ms]),
                     fmt_ci([m["env_steps"] / 1000 for m in ms], seed=i),
                     fmt_ci([m["train_success"] for m in ms], seed=i)])  # fmt: skip
    print_table(lines[0], headers, rows)
    lines += [md_table(headers, rows), ""]
    pair_headers = ["difference (paired by seed)", "metric", "seeds", "mean [95 % bootstrap]",
                    "sign-flip p (exact, two-sided)", "seeds first ahead"]  # fmt: skip
    pairs = []
    for a, b in itertools.combinations(arms, 2):
        seeds = sorted(set(by_arm[a]) & set(by_arm[b]))
        for j, (key, title) in enumerate(METRICS.items()):
            diffs = [by_arm[a][s][key] - by_arm[b][s][key] for s in seeds]
            diffs = [d for d in diffs if np.isfinite(d)]
            if not diffs:
                continue
            lo, hi = bootstrap_ci(diffs, seed=100 + j)
            ahead = sum(d > 0 for d in diffs)
            pairs.append([f"{a} − {b}", title, str(len(diffs)),
                          f"{np.mean(diffs):+.3f} [{lo:+.3f}, {hi:+.3f}]",
                          f"{sign_flip_p(diffs):.4f}", f"{ahead}/{len(diffs)}"])  # fmt: skip
        # collection: how many env steps each arm took in the same minutes (a ratio per seed)
        ratios = [by_arm[a][s]["env_steps"] / by_arm[b][s]["env_steps"] for s in seeds
                  if by_arm[b][s]["env_steps"] > 0]  # fmt: skip
        if ratios:
            lo, hi = bootstrap_ci(ratios, seed=100 + len(METRICS))
            logs = [math.log(r) for r in ratios]
            ahead = sum(r > 1 for r in ratios)
            pairs.append([f"{a} / {b}", "env steps collected (ratio)", str(len(ratios)),
                          f"{np.mean(ratios):.2f}× [{lo:.2f}, {hi:.2f}]",
                          f"{sign_flip_p(logs):.4f}", f"{ahead}/{len(ratios)}"])  # fmt: skip
    if pairs:
        title = "Paired differences per pair of arms (first − second), over the seeds both ran"
        print_table(title, pair_headers, pairs)
        lines += [title, "", md_table(pair_headers, pairs), ""]
    lines.append("Final held-out success per seed (mean action / sampled actions):")
    for arm in arms:
        cells = ", ".join(f"s{s} {m['final']:.2f}/{m['final_sampled']:.2f}"
                          for s, m in sorted(by_arm[arm].items()))  # fmt: skip
        lines.append(f"- {arm}: {cells}")
    text = "\n".join(lines) + "\n"
    (out / "d3_race_summary.md").write_text(text)
    plot(out, records, arms)
    print("\n".join(lines[-1 - len(arms) :]))
    print(f"table: {out / 'd3_race_summary.md'}; plot: {out / 'd3_race.png'}")
    return text


def plot(out: Path, records: list[dict[str, Any]], arms: list[str]) -> None:
    """Mean held-out curves against minutes and env steps (thin lines: single seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    t_end = max(c["time_s"] for r in records for c in r["curve"])
    s_end = max(c["env_steps"] for r in records for c in r["curve"])
    for arm in arms:
        curves = [r["curve"] for r in records if r["arm"] == arm]
        for ax, key, end, scale in ((axes[0], "time_s", t_end, 60.0),
                                    (axes[1], "env_steps", s_end, 1000.0)):  # fmt: skip
            grid = np.linspace(0, end, 60)
            # against env steps a run's curve ends at its last snapshot (runs collect different
            # numbers of env steps in the same minutes)
            cut = key == "env_steps"
            rows = [[np.nan if cut and g > c[-1][key] else at(c, key, g) for g in grid]
                    for c in curves]  # fmt: skip
            ys = np.array(rows, dtype=np.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # grid points before a snapshot
                mean = np.nanmean(ys, axis=0)
            if cut:  # the mean only where every seed has data
                mean[np.isnan(ys).any(axis=0) & (grid > 0)] = np.nan
            (line,) = ax.plot(grid / scale, mean, label=f"{arm} (n={len(curves)})")
            for y in ys:
                ax.plot(grid / scale, y, color=line.get_color(), alpha=0.2, lw=0.8)
    axes[0].set(xlabel="minutes", ylabel="held-out success", ylim=(-0.02, 1))
    axes[1].set(xlabel="env steps (thousands)", ylim=(-0.02, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    regimes = "/".join(sorted({r["regime"] for r in records}))
    fig.suptitle(f"D3 (race), {regimes} regime: mean over seeds (thin: single seeds)")
    fig.tight_layout()
    fig.savefig(out / "d3_race.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regime", choices=REGIMES, default="instant")
    ap.add_argument("--minutes", type=float, default=10.0, help="training budget per run")
    ap.add_argument("--seeds", type=int, help="seeds per arm (instant 6, slow 4)")
    ap.add_argument("--first-seed", type=int, help="first seed (instant 100, slow 200)")
    ap.add_argument("--eval-episodes", type=int, default=50, help="held-out scenes per snapshot")
    ap.add_argument("--snapshot-every-s", type=float, default=30.0)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--config", type=Path, default=TUNED_CONFIG)
    ap.add_argument("--speeds", type=float, nargs="+", default=[1.0, 1.0, 3.0],
                    help="slow regime: each worker's slowdown (one worker each)")  # fmt: skip
    ap.add_argument("--step-ms", type=float, default=20.0, help="slow regime: 1x step time")
    ap.add_argument("--latency-ms", type=float, default=500.0,
                    help="slow regime: reward model sleep per backend batch")  # fmt: skip
    ap.add_argument("--out", type=Path, help="records folder (default per regime)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d3_race",
                    help="run directories (metrics, snapshots; not records)")  # fmt: skip
    ap.add_argument("--report-only", action="store_true", help="re-render from records only")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = ap.parse_args(argv)
    n_seeds, first, out = DEFAULTS[args.regime]
    n_seeds = args.seeds if args.seeds is not None else n_seeds
    first = args.first_seed if args.first_seed is not None else first
    out = args.out or out
    (out / "runs").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        tuned = is_tuned(args.config)
        if not tuned:
            print(f"warning: {config_label(args.config)} holds placeholder blocks "
                  "(run bench/d3_tune.py first); the records say so", flush=True)  # fmt: skip
        overrides = [*regime_overrides(args.regime, args.speeds, args.step_ms, args.latency_ms),
                     *args.overrides]  # fmt: skip
        stamp = time.strftime("%Y%m%d-%H%M%S")
        import ray

        ray_init(2)
        try:
            for seed in range(first, first + n_seeds):
                k = seed % len(args.arms)
                for arm in args.arms[k:] + args.arms[:k]:  # the order rotates with the seed
                    path = out / "runs" / f"{slug(arm)}-s{seed}.json"
                    if path.exists():
                        print(f"{arm} seed {seed}: recorded already ({path.name})", flush=True)
                        continue
                    rec = run_and_evaluate(
                        config=args.config, algo=ARMS[arm], seed=seed, minutes=args.minutes,
                        run_dir=args.runs / stamp / f"{slug(arm)}-s{seed}",
                        snapshot_every_s=args.snapshot_every_s, eval_episodes=args.eval_episodes,
                        scene_offset=0, overrides=overrides,
                    )  # fmt: skip
                    rec.update(arm=arm, regime=args.regime, tuned=tuned)
                    write_json(path, rec)
                    print(f"{arm} seed {seed}: held-out {rec['curve'][-1]['success']:.2f} "
                          f"(sampled {rec['final_sampled']:.2f}), {rec['wall_s']:.0f} s with "
                          f"evaluation, load {rec['load']['min']:.1f}-{rec['load']['max']:.1f}",
                          flush=True)  # fmt: skip
        finally:
            ray.shutdown()
    report(out)


if __name__ == "__main__":
    main()
