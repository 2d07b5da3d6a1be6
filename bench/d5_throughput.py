"""D5 throughput: env steps per second of each cell of the algorithm × system 2×2 in a regime,
from short runs side by side (``--rounds`` rounds, each running every cell once, the order
reversed every other round).

A run trains the cell from its named config for ``--minutes``; its rate is the env steps the
workers played (``worker_env_steps``, the last metrics row) over the run's seconds (``time_s``),
and the share of that time the workers sat out barriers (``paused_s``, DistRL's barrier). The
load average is logged while each run goes; on a loaded machine the rates say what that machine
gave, not what the designs can do, and the report says which.

    python bench/d5_throughput.py --regime instant --minutes 1
    python bench/d5_throughput.py --regime slow --minutes 1      # 500 ms model, workers 1x/1x/3x
    python bench/d5_throughput.py --regime slow --report-only

``--intake-from-min M`` also records the learner's intake per second (``env_steps_in`` of
``metrics.csv``) from minute M to the run's end, beside the workers' count (the report adds a
column); ``--first-round K`` numbers this part's rounds from K, so parts do not overwrite each
other's records.

Records: ``<out>/<regime>/<cell>-r<round>.json``, each with the block it trained (``block``:
the cell's ``learner`` or ``grpo`` block and its ``workers``), which the race's composition
matches against its own runs.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, LoadLog, load_samples, machine_note, md_table
from _d3_runs import (
    algo_block,
    load_range,
    load_stats,
    read_records,
    regime_overrides,
    train_run,
    write_json,
)
from _d5_cells import CELLS, D5_CELLS, LABELS, cell_config, cell_overrides


def rate_of(metrics_csv: Path, num_workers: int = 1) -> dict[str, float]:
    """Env steps per second and the paused share (``paused_s``, summed over the workers, over
    the workers' seconds) from a run's last metrics row.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "metrics.csv"
    >>> _ = p.write_text("time_s,worker_env_steps,paused_s\\n10,500,0\\n20,1200,10\\n")
    >>> r = rate_of(p, num_workers=2)
    >>> r["env_steps_per_s"], r["paused_s"], r["paused_share"]
    (60.0, 10.0, 0.25)
    """
    with metrics_csv.open() as fh:
        last = list(csv.DictReader(fh))[-1]
    steps, secs = float(last["worker_env_steps"]), float(last["time_s"])
    paused = float(last.get("paused_s") or 0.0)
    return {"env_steps": steps, "seconds": secs,
            "env_steps_per_s": steps / secs if secs > 0 else math.nan,
            "paused_s": paused, "num_workers": num_workers,
            "paused_share": paused / (secs * num_workers) if secs > 0 else math.nan}  # fmt: skip


def intake_of(metrics_csv: Path, from_min: float) -> dict[str, float]:
    """The learner's intake (``env_steps_in``) per second from minute ``from_min`` to the run's
    last metrics row: from the last row at or before that minute (the run's start if none).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "metrics.csv"
    >>> _ = p.write_text("time_s,env_steps_in\\n60,100\\n120,400\\n300,1300\\n")
    >>> r = intake_of(p, 2)
    >>> r["intake_env_steps"], r["intake_seconds"], r["intake_env_steps_per_s"]
    (900.0, 180.0, 5.0)
    """
    with metrics_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    last = rows[-1]
    before = [r for r in rows if float(r["time_s"]) <= from_min * 60]
    t0, s0 = (float(before[-1]["time_s"]), float(before[-1]["env_steps_in"])) if before else (0, 0)
    steps, secs = float(last["env_steps_in"]) - s0, float(last["time_s"]) - t0
    return {"intake_from_min": from_min, "intake_from_s": t0, "intake_env_steps": steps,
            "intake_seconds": secs,
            "intake_env_steps_per_s": steps / secs if secs > 0 else math.nan}  # fmt: skip


def _workers(run_dir: Path) -> int:
    import yaml

    return int(yaml.safe_load((run_dir / "config.yaml").read_text())["workers"]["num_workers"])


def run_part(args: argparse.Namespace) -> None:
    import ray
    from _d3_runs import ray_init

    extra = [*regime_overrides(args.regime, latency_ms=args.latency_ms, step_ms=args.step_ms)
             ] if args.regime == "slow" else []  # fmt: skip
    ray_init(2)  # as D3
    try:
        for i in range(args.first_round, args.first_round + args.rounds):
            # the order reverses every other round of this part, as given on its command line
            order = args.cells if (i - args.first_round) % 2 == 0 else args.cells[::-1]
            for cell in order:
                path = args.out / args.regime / f"{cell}-r{i}.json"
                if path.exists():
                    continue
                run_dir = args.runs / args.regime / f"{cell}-r{i}"
                run_dir.mkdir(parents=True, exist_ok=True)
                log = run_dir / "load.log"
                overrides = [*cell_overrides(cell), *extra, *args.overrides]
                started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                with LoadLog(log, every_s=max(1.0, min(30.0, args.minutes * 15))):
                    counters = train_run(cell_config(cell), CELLS[cell][0], run_dir,
                                         args.minutes, args.seed, 3600.0, overrides)  # fmt: skip
                rec: dict[str, Any] = {"cell": cell, "round": i, "regime": args.regime,
                                       "minutes": args.minutes, "overrides": overrides,
                                       "block": algo_block(run_dir, CELLS[cell][0]),
                                       "started_utc": started, "counters": counters,
                                       **rate_of(run_dir / "metrics.csv", _workers(run_dir)),
                                       "load": load_stats(load_samples(log))}  # fmt: skip
                if args.intake_from_min is not None:  # beside the workers' count, never instead
                    rec.update(intake_of(run_dir / "metrics.csv", args.intake_from_min))
                write_json(path, rec)
                print(f"{cell} round {i}: {rec['env_steps_per_s']:.1f} env steps/s", flush=True)
    finally:
        ray.shutdown()


def report(args: argparse.Namespace) -> str:
    """Median rate per cell and its ratio to DistRL's asynchronous cell, from the records."""
    records = read_records(args.out / args.regime)
    if not records:
        raise SystemExit(f"no records in {args.out / args.regime}")
    base = [r["env_steps_per_s"] for r in records if r["cell"] == "distrl_async"]
    intake = sorted({r["intake_from_min"] for r in records if "intake_from_min" in r})
    rows = []
    for cell in CELLS:
        mine = [r for r in records if r["cell"] == cell]
        if not mine:
            continue
        rates = [r["env_steps_per_s"] for r in mine]
        ratio = np.median(rates) / np.median(base) if base else math.nan
        rows.append([LABELS[cell], len(mine), f"{np.median(rates):.1f}",
                     f"{min(rates):.1f}-{max(rates):.1f}", f"{ratio:.2f}",
                     f"{np.median([r['paused_share'] for r in mine]):.2f}"])  # fmt: skip
        if intake:
            got = [r["intake_env_steps_per_s"] for r in mine if "intake_env_steps_per_s" in r]
            rows[-1].append(f"{np.median(got):.1f} (n={len(got)})" if got else "-")
    loads = load_range(records)
    lines = [f"D5 throughput, regime {args.regime}, {records[0]['minutes']:g} min runs, "
             f"{machine_note(loads)}", ""]  # fmt: skip
    headers = ["cell", "runs", "env steps/s (median)", "range", "÷ DistRL async", "paused share"]
    if intake:
        since = "/".join(f"{m:g}" for m in intake)
        headers.append(f"learner intake env steps/s from minute {since} (median)")
    lines += [md_table(headers, rows), ""]
    text = "\n".join(lines) + "\n"
    (args.out / f"d5_throughput_{args.regime}.md").write_text(text)
    print(text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=list(D5_CELLS), choices=list(CELLS))
    ap.add_argument("--regime", choices=["instant", "slow"], default="instant")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--first-round", type=int, default=0,
                    help="number of this part's first round (its records' -r<round>)")  # fmt: skip
    ap.add_argument("--intake-from-min", type=float, default=None,
                    help="also record the learner's intake (env_steps_in) per second from "
                    "this minute to the run's end")  # fmt: skip
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=300)
    ap.add_argument("--latency-ms", type=float, default=500.0)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "d5_throughput")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d5_throughput")
    ap.add_argument("--report-only", action="store_true", help="re-render from records only")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = ap.parse_args(argv)
    (args.out / args.regime).mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_part(args)
    report(args)


if __name__ == "__main__":
    main()
