"""D4: env steps the learner takes in with a slow reward model, with and without settled episodes.

DistRL's own regime: the shipped ReachPlace training config with three workers at 1×/1×/3× a
20 ms step (``workers.step_delay_s``). Each algorithm runs the same minutes in three arms, one
after the other (the order turns every round):

* ``instant`` — the reward model answers at once (the config's ``calls`` as shipped before
  settled episodes, ``async``): the reference;
* ``slow`` — a 500 ms reward model (the mock backend's ``latency_ms``), ``calls: async``: the
  env waits for late answers and at every episode's end;
* ``slow_deferred`` — the same model, ``calls: deferred``: the env never waits, the worker hands
  each episode on once it is settled;
* ``slow_2x``, ``slow_deferred_2x`` (with ``--arms``) — the same two call modes against the same
  500 ms model on two services (the workers' endpoint pool spreads the checks): one service
  answers at most 8 checks per 500 ms batch, fewer than this regime asks for at instant speed.

Every run goes through the library's own entry (:func:`evolve_envs.training.driver.run_train`, as
``evolve-envs train`` runs it). Reported per run: the env steps the learner took in
(``env_steps_in``) and the env steps the workers played, and per arm the ratio to ``instant``
in the same round. The load average is logged while the runs go (``load.log``).

    python bench/d4_settled_intake.py                        # DistRL and GRPO, 2 min per run
    python bench/d4_settled_intake.py --algos distrl --minutes 3
    python bench/d4_settled_intake.py --algos distrl --arms instant slow_2x slow_deferred_2x \
        --first-round 1                                      # the model on two services
    python bench/d4_settled_intake.py --quick                # 0.3 min per run, a smoke test
    python bench/d4_settled_intake.py --report-only          # the table from the records

Records (one JSON per run) and the table go to ``bench/results/d4_settled_intake/`` (``--out``);
the runs' own directories to ``runs/d4_settled_intake/`` (``--runs``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, LoadLog, load_samples, machine_note, print_table
from _d3_runs import BASE_CONFIG, config_label, load_range, ray_init, read_records, write_json

OUT = ROOT / "bench" / "results" / "d4_settled_intake"
ARMS = ("instant", "slow", "slow_deferred", "slow_2x", "slow_deferred_2x")


def arm_overrides(
    arm: str, speeds: Sequence[float] = (1.0, 1.0, 3.0), step_ms: float = 20.0,
    latency_ms: float = 500.0, endpoints: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """The ``KEY=VALUE`` overrides of an arm: the workers of mixed speed, the model's latency
    and the call mode (``_2x`` arms: the ``endpoints`` of two services, started by the caller).

    >>> arm_overrides("slow_deferred")[1::2]
    ['workers.step_delay_s=[0.02, 0.02, 0.06]', 'reward_model.calls=deferred']
    """
    if arm not in ARMS:
        raise ValueError(f"arm: expected one of {ARMS}, got {arm!r}")
    delays = [round(step_ms * float(s) / 1000.0, 6) for s in speeds]
    latency = 0.0 if arm == "instant" else latency_ms
    where = (
        f"reward_model.endpoint={json.dumps(list(endpoints))}"
        if arm.endswith("_2x")
        else f"reward_model.embedded_backend_kwargs.latency_ms={latency:g}"
    )
    return [
        f"workers.num_workers={len(delays)}",
        f"workers.step_delay_s={json.dumps(delays)}",
        where,
        f"reward_model.calls={'deferred' if 'deferred' in arm else 'async'}",
    ]


def one_run(config: Path, algo: str, arm: str, minutes: float, seed: int, runs: Path,
            latency_ms: float) -> dict[str, Any]:  # fmt: skip
    """Train ``minutes`` with the arm's overrides; the record of the run."""
    import io

    from evolve_envs.reward.service.hosting.embedded import EmbeddedService
    from evolve_envs.training.driver import TrainOptions, run_train

    run_dir = runs / f"{algo}-{arm}-s{seed}"
    log = run_dir / "load.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with contextlib.ExitStack() as services:
        # _2x arms: the same 500 ms model on two services, the workers' pool spreads the checks
        model = {"rule": "reach_place", "latency_ms": latency_ms}
        urls = [services.enter_context(EmbeddedService("mock", model)).url
                for _ in range(2 if arm.endswith("_2x") else 0)]  # fmt: skip
        overrides = arm_overrides(arm, latency_ms=latency_ms, endpoints=urls)
        services.enter_context(LoadLog(log, every_s=max(1.0, min(30.0, minutes * 10))))
        res = run_train(
            TrainOptions(
                config=[str(config)],
                algo=algo,
                run_dir=run_dir,
                minutes=minutes,
                overrides=[
                    *overrides,
                    f"run.seed={seed}",
                    "run.tensorboard=false",
                    f"run.log_every_s={max(2.0, minutes * 6):g}",
                ],  # fmt: skip
                progress_bar=False,
                log=io.StringIO(),
            )
        )
    counters = {k: int(v) for k, v in res.counters.items()}
    workers = _worker_counts(run_dir)
    return {
        "algo": algo,
        "arm": arm,
        "seed": seed,
        "minutes": minutes,
        "config": config_label(config),
        "overrides": overrides,
        "started_utc": started,
        "wall_s": round(time.monotonic() - t0, 1),
        "env_steps_in": counters.get("env_steps_in", 0),
        "counters": counters,
        "last_row": {k: v for k, v in res.last_metrics.items() if isinstance(v, int | float)},
        "workers": workers,
        "load": [float(x) for x in load_samples(log)],
    }


def _worker_counts(run_dir: Path) -> dict[str, Any]:
    """The last metrics row's worker columns (settled episodes, cut steps, unsettled ones)."""
    import csv

    path = run_dir / "metrics.csv"
    if not path.is_file():
        return {}
    rows = list(csv.DictReader(path.open()))
    if not rows:
        return {}
    keys = ("worker_env_steps", "settled_episodes", "cut_steps", "unsettled_episodes",
            "saturation_waits")  # fmt: skip
    out = {k: float(rows[-1][k]) for k in keys if rows[-1].get(k) not in (None, "")}
    lags = [float(r["staleness"]) for r in rows if r.get("staleness") not in (None, "", "nan")]
    out["staleness_mean"] = float(np.mean(lags)) if lags else math.nan
    return out


def report(out: Path) -> str:
    """The table of every record in ``out``, written to ``out/summary.md``: per algorithm and
    arm, the env steps the learner took in per run, their mean and ratio to ``instant`` in the
    same round, and the means of the env steps the workers played, the resets that waited for
    a saturated service and the policy-version staleness at intake."""
    records = read_records(out, "r*.json")
    if not records:
        raise SystemExit(f"no records in {out}")
    rows = []
    for algo in sorted({r["algo"] for r in records}):
        mine = [r for r in records if r["algo"] == algo]
        base = {r["round"]: r["env_steps_in"] for r in mine if r["arm"] == "instant"}
        for arm in ARMS:
            runs = [r for r in mine if r["arm"] == arm]
            if not runs:
                continue
            steps = [r["env_steps_in"] for r in runs]
            ratios = [r["env_steps_in"] / base[r["round"]] for r in runs if base.get(r["round"])]

            def mean_of(key: str, runs: list[dict[str, Any]] = runs) -> float:
                vals = [r["workers"].get(key, math.nan) for r in runs]
                return float(np.mean(vals)) if vals else math.nan

            rows.append(
                [
                    algo,
                    arm,
                    len(runs),
                    " / ".join(str(s) for s in steps),
                    float(np.mean(steps)),
                    " / ".join(f"{x:.2f}" for x in ratios) if ratios else "-",
                    float(np.mean(ratios)) if ratios else math.nan,
                    mean_of("worker_env_steps"),
                    mean_of("saturation_waits"),
                    mean_of("staleness_mean"),
                ]
            )
    minutes = sorted({r["minutes"] for r in records})
    load = load_range([{"load": {"samples": r["load"]}} for r in records])
    title = (
        f"D4, env steps the learner took in, {', '.join(f'{m:g}' for m in minutes)} min "
        f"per run, workers 1x/1x/3x of a 20 ms step, config {records[0]['config']}. "
        f"{machine_note(load)}"
    )
    headers = ["algo", "arm", "runs", "env steps in (per run)", "mean", "/ instant (per round)",
               "mean ratio", "env steps played", "saturation waits", "staleness"]  # fmt: skip
    text = print_table(title, headers, rows)
    (out / "summary.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", nargs="+", default=["distrl", "grpo"], choices=["distrl", "grpo"])
    ap.add_argument("--arms", nargs="+", default=list(ARMS[:3]), choices=ARMS)
    ap.add_argument("--minutes", type=float, default=2.0, help="training budget per run")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every arm per algorithm")
    ap.add_argument("--first-round", type=int, default=0, help="number of the first round")
    ap.add_argument("--latency-ms", type=float, default=500.0)
    ap.add_argument("--config", type=Path, default=BASE_CONFIG)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="0.3 min per run (a smoke test)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d4_settled_intake",
                    help="the training runs' directories (not kept in the repository)")  # fmt: skip
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    out = args.out
    if not args.report_only:
        import ray

        minutes = 0.3 if args.quick else args.minutes
        out.mkdir(parents=True, exist_ok=True)
        ray_init(2)
        try:
            for rnd in range(args.first_round, args.first_round + args.rounds):
                for algo in args.algos:
                    arms = args.arms if rnd % 2 == 0 else list(reversed(args.arms))
                    for arm in arms:
                        rec = one_run(args.config, algo, arm, minutes, args.seed + rnd,
                                      args.runs, args.latency_ms)  # fmt: skip
                        rec["round"] = rnd
                        write_json(out / f"r{rnd}-{algo}-{arm}.json", rec)
                        print(f"{algo} {arm} round {rnd}: {rec['env_steps_in']} env steps in, "
                              f"load {rec['load']}", flush=True)  # fmt: skip
        finally:
            ray.shutdown()
    report(out)


if __name__ == "__main__":
    main()
