"""D3 tuning: the same Ray Tune budget for DistRL and GRPO, the winners shipped as one config.

For each arm (DistRL prioritized, GRPO) the same number of trials (``--trials``, 6) with the same
wall-clock budget each (``--minutes``, 5), every trial a real training run through
:func:`evolve_envs.training.driver.run_train` on ``evolve_envs/configs/distrl/reach_place.yaml``
with the trial's knobs as overrides, on the same dedicated *tuning* seeds (``--seeds`` from
``--first-seed``, 1 from 1000: race seeds start at 100 and 200, never here). The knobs searched
(:data:`SPACE`) are each arm's own; the knobs both arms have (learning rate, entropy
coefficient and floor, clip, invalid-action penalty) have the same ranges in both.

* **Sampling** — Tune's variant generator (``generate_variants``; ``tune.loguniform`` /
  ``tune.choice`` domains) draws trial ``i`` of an arm from its own seeded RNG
  (``[--search-seed, arm, i]``), so a trial's knobs do not depend on which parts ran before it;
  trial 0 of each arm is the arm's shipped block (the point to beat).
* **Running** — one ``tune.Tuner`` per invocation runs its trials one at a time
  (``max_concurrent_trials=1``: a 2-core box), arms interleaved (trial ``i`` of both arms, the
  order rotating with ``i``); Tune keeps its experiment state under ``runs/d3_tune/``.
* **Scoring** — after training, each snapshot (``--snapshot-every-s``) is scored on
  ``--eval-episodes`` held-out scenes ``held_out_seeds(n, 100_000)`` (mean action, env success
  flag; :func:`evolve_envs.training.evaluation.evaluate_policy`): never training scenes, and not the
  race's scenes either. The trial's score is the area under that curve (AUC), averaged over the
  tuning seeds; the highest AUC per arm wins.
* **Shipping** — the report writes the winners into ``--config-out``
  (``evolve_envs/configs/distrl/reach_place_tuned.yaml``): DistRL's in ``distrl:``, GRPO's in
  ``grpo:``, the rest of ``reach_place.yaml`` unchanged, so ``evolve-envs train --config
  reach_place_tuned --algo grpo|distrl`` runs either.

    python bench/d3_tune.py --trials 3                   # trials 0-2 of both arms (~35 min)
    python bench/d3_tune.py --trials 3 --first-trial 3   # trials 3-5 (~35 min)
    python bench/d3_tune.py --report-only                # tables + tuned config from records

Records: ``<out>/trials/<arm>-t<i>.json`` (knobs, per-seed curves, AUC, load), ``<out>/space.json``
and ``<out>/d3_tune_summary.md``; a trial already recorded is skipped, so parts append.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, machine_note, md_table, print_table
from _d3_runs import (
    BASE_CONFIG,
    TUNE_SCENES,
    TUNED_CONFIG,
    UNTUNED_MARK,
    config_label,
    load_range,
    ray_init,
    read_records,
    run_and_evaluate,
    write_json,
)
from d3_learning_curves import auc

ARMS = {"distrl": "DistRL prioritized", "grpo": "GRPO"}
_LR = ("loguniform", 3e-4, 3e-3)
_ENT = ("loguniform", 1e-4, 1e-2)
_FLOOR = ("choice", [None, 0.8, 1.2, 1.6])
_CLIP = ("choice", [0.1, 0.2, 0.3])
_INVALID = ("choice", [0.0, 0.01, 0.1])
#: The search space per arm: dotted config key -> (Tune domain, its arguments). GRPO's batch is
#: ``episodes_per_env`` (episodes per env per round), so it scales with the workers of a regime.
SPACE: dict[str, dict[str, tuple[Any, ...]]] = {
    "distrl": {
        "distrl.lr": _LR,
        "distrl.max_sample_ratio": ("choice", [4, 8, 16, 32]),
        "distrl.batch_size": ("choice", [4, 8, 16]),
        "distrl.entropy_coef": _ENT,
        "distrl.entropy_target": _FLOOR,
        "distrl.clip": _CLIP,
        "distrl.invalid_coef": _INVALID,
    },
    "grpo": {
        "grpo.lr": _LR,
        "grpo.epochs": ("choice", [1, 2, 4, 8]),
        "grpo.minibatch_steps": ("choice", [64, 128, 256, 512]),
        "grpo.group_size": ("choice", [2, 4, 8]),
        "grpo.episodes_per_env": ("choice", [1, 2, 4]),
        "grpo.entropy_coef": _ENT,
        "grpo.entropy_target": _FLOOR,
        "grpo.clip": _CLIP,
        "grpo.invalid_coef": _INVALID,
    },
}


def shipped_knobs(arm: str) -> dict[str, Any]:
    """The arm's knobs as ``reach_place.yaml`` ships them (trial 0)."""
    from evolve_envs import load_train_config

    cfg = load_train_config(BASE_CONFIG, {"algo": arm}).model_dump()
    return {key: cfg[key.split(".")[0]][key.split(".")[1]] for key in SPACE[arm]}


def sample_knobs(arm: str, trial: int, search_seed: int) -> dict[str, Any]:
    """Trial ``trial``'s knobs: the shipped block for trial 0, else one draw of Tune's variant
    generator from the RNG ``[search_seed, arm, trial]`` (floats to 3 significant digits)."""
    if trial == 0:
        return shipped_knobs(arm)
    from ray import tune
    from ray.tune.search.variant_generator import generate_variants

    spec = {key: getattr(tune, kind)(*args) for key, (kind, *args) in SPACE[arm].items()}
    rng = np.random.default_rng([search_seed, list(ARMS).index(arm), trial])
    _, resolved = next(generate_variants(spec, random_state=rng))
    return {k: float(f"{v:.3g}") if isinstance(v, float) else v for k, v in resolved.items()}


def knob_key(key: str) -> str:
    """A knob's config key: records written before DistRL's settings had a block of their own
    name them ``learner.*``; they are ``distrl.*``.

    >>> knob_key("learner.lr"), knob_key("grpo.lr")
    ('distrl.lr', 'grpo.lr')
    """
    block, _, name = key.partition(".")
    return f"distrl.{name}" if block == "learner" else key


def knob_overrides(knobs: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` overrides of a trial's knobs."""
    return [f"{knob_key(key)}={'null' if value is None else value}" for key, value in knobs.items()]


def tune_trial(config: dict[str, Any]) -> None:
    """The Tune trainable: train the job's arm with its knobs on every tuning seed, score,
    write the trial's record, report its AUC to Tune."""
    from ray import tune

    job = config["job"]
    out = Path(job["out"])
    record: dict[str, Any] = {k: job[k] for k in ("arm", "trial", "knobs", "seeds", "minutes",
                                                   "extra")}  # fmt: skip
    record.update(overrides=knob_overrides(job["knobs"]), runs=[], config=job["config"])
    try:
        for seed in job["seeds"]:
            run = run_and_evaluate(
                config=Path(job["config"]), algo=job["arm"], seed=seed, minutes=job["minutes"],
                run_dir=Path(job["runs"]) / f"{job['arm']}-t{job['trial']}-s{seed}",
                snapshot_every_s=job["snapshot_every_s"], eval_episodes=job["eval_episodes"],
                scene_offset=TUNE_SCENES, overrides=[*record["overrides"], *job["extra"]],
            )  # fmt: skip
            run["auc"] = auc(run["curve"], job["minutes"] * 60)
            record["runs"].append(run)
        record["auc"] = float(np.mean([r["auc"] for r in record["runs"]]))
        record["final"] = float(np.mean([r["curve"][-1]["success"] for r in record["runs"]]))
    except Exception as exc:  # the trial is spent either way: recorded with its error
        record.update(error=f"{type(exc).__name__}: {exc}", auc=math.nan, final=math.nan)
        write_json(out / "trials" / f"{job['arm']}-t{job['trial']}.json", record)
        raise
    write_json(out / "trials" / f"{job['arm']}-t{job['trial']}.json", record)
    tune.report({"auc": record["auc"], "final": record["final"]})


def run_part(args: argparse.Namespace) -> None:
    """The trials ``first_trial .. first_trial + trials - 1`` of every arm, as one Tuner."""
    import ray
    from ray import tune

    stamp = time.strftime("%Y%m%d-%H%M%S")
    jobs = []
    for i in range(args.first_trial, args.first_trial + args.trials):
        k = i % len(args.arms)
        for arm in args.arms[k:] + args.arms[:k]:  # interleaved, the order rotating with i
            if (args.out / "trials" / f"{arm}-t{i}.json").exists():
                print(f"{arm} trial {i}: recorded already", flush=True)
                continue
            jobs.append({
                "arm": arm, "trial": i, "knobs": sample_knobs(arm, i, args.search_seed),
                "seeds": list(range(args.first_seed, args.first_seed + args.seeds)),
                "minutes": args.minutes, "snapshot_every_s": args.snapshot_every_s,
                "eval_episodes": args.eval_episodes, "config": str(BASE_CONFIG),
                "out": str(args.out.resolve()), "extra": list(args.overrides),
                "runs": str(args.runs.resolve() / stamp),
            })  # fmt: skip
    if not jobs:
        return

    def name(trial: Any) -> str:
        job = trial.config["job"]
        return f"{job['arm']}-t{job['trial']}"

    from evolve_envs import load_train_config

    # the trial's process (the learner, as D3's driver) and the rollout workers it starts
    w = load_train_config(BASE_CONFIG).workers
    bundles = [{"CPU": 1.0}] + [{"CPU": w.num_cpus}] * w.num_workers
    ray_init(3)  # 2 CPUs for the rollout workers (as in D3), 1 for the trial's process
    try:
        tuner = tune.Tuner(
            tune.with_resources(tune_trial, tune.PlacementGroupFactory(bundles)),
            param_space={"job": tune.grid_search(jobs)},
            tune_config=tune.TuneConfig(max_concurrent_trials=1, trial_name_creator=name,
                                        trial_dirname_creator=name),  # fmt: skip
            run_config=tune.RunConfig(name=f"d3_tune-{stamp}", verbose=0,
                                      storage_path=str(args.runs.resolve() / "tune")),
        )  # fmt: skip
        results = tuner.fit()
        for res in results:
            if res.error is not None:
                print(f"trial {res.config['job']['arm']}-t{res.config['job']['trial']} failed: "
                      f"{str(res.error).splitlines()[0]}", flush=True)  # fmt: skip
    finally:
        ray.shutdown()


def write_tuned_config(path: Path, winners: dict[str, dict[str, Any] | None], note: str) -> None:
    """``reach_place.yaml`` with each arm's block set to its winner's knobs (the shipped ones,
    and the placeholder mark, for an arm with no trials yet); validated after writing."""
    import yaml

    from evolve_envs import load_train_config

    data = yaml.safe_load(BASE_CONFIG.read_text())
    for arm in ARMS:
        rec = winners.get(arm)
        knobs = rec["knobs"] if rec else shipped_knobs(arm)
        for text in knob_overrides(knobs):
            key, _, value = text.partition("=")
            block, name = key.split(".")
            data[block][name] = yaml.safe_load(value)
    untuned = [ARMS[a] for a in ARMS if not winners.get(a)]
    head = [
        "# ReachPlace with each algorithm's tuned block (bench/d3_tune.py writes this file; see",
        "# bench/RESULTS.md, D3 (race)):",
        "#   evolve-envs train --config reach_place_tuned --algo distrl   # the distrl: block",
        "#   evolve-envs train --config reach_place_tuned --algo grpo     # the grpo: block",
        *(f"# {line}" for line in note.splitlines()),
    ]
    if untuned:
        head.append(f"# {UNTUNED_MARK}: {', '.join(untuned)} (the blocks of reach_place.yaml)")
    path.write_text("\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False))
    load_train_config(path)


def domain_text(space: dict[str, tuple[Any, ...]], knob: str) -> str:
    """``loguniform(0.0003, 0.003)`` or ``choice(4, 8, 16)``: the arm's domain of ``knob`` (``-``
    if the arm has no such knob)."""
    for key, (kind, *args) in space.items():
        if key.split(".", 1)[1] == knob:
            values = args[0] if kind == "choice" else args
            return f"{kind}({', '.join(map(str, values))})"
    return "-"


def report(args: argparse.Namespace) -> str:
    """Trials and winners per arm from the records; writes the summary and the tuned config."""
    records = read_records(args.out / "trials")
    winners: dict[str, dict[str, Any] | None] = {}
    runs = [run for r in records for run in r.get("runs", [])]
    lines = [f"D3 tuning on ReachPlace, {machine_note(load_range(runs))}", ""]
    knobs = dict.fromkeys(key.split(".", 1)[1] for a in ARMS for key in SPACE[a])
    space_rows = [[knob, *[domain_text(SPACE[a], knob) for a in ARMS]] for knob in knobs]
    lines += [
        "Search space (trial 0 of each arm: its shipped block)",
        "",
        md_table(["knob", *[f"{ARMS[a]} ({a})" for a in ARMS]], space_rows),
        "",
    ]
    for arm in ARMS:
        mine = sorted((r for r in records if r["arm"] == arm), key=lambda r: r["trial"])
        ok = [r for r in mine if np.isfinite(r.get("auc", math.nan))]
        best = max(ok, key=lambda r: (r["auc"], -r["trial"])) if ok else None
        winners[arm] = best
        headers = ["trial", "knobs", "tuning AUC", "final", "final (sampled)", "env steps (k)",
                   "updates"]  # fmt: skip
        rows = []
        for r in mine:
            runs = r.get("runs", [])
            steps = np.mean([x["curve"][-1]["env_steps"] for x in runs]) / 1e3 if runs else math.nan
            ups = np.mean([x["counters"]["updates"] for x in runs]) if runs else math.nan
            sampled = np.mean([x["final_sampled"] for x in runs]) if runs else math.nan
            knobs = ", ".join(f"{k.split('.')[1]} {v}" for k, v in r["knobs"].items())
            mark = " **(winner)**" if r is best else ""
            rows.append([f"{r['trial']}{mark}", knobs, f"{r.get('auc', math.nan):.3f}",
                         f"{r.get('final', math.nan):.3f}", f"{sampled:.3f}", f"{steps:.1f}",
                         f"{ups:.0f}" if r.get("error") is None else r["error"][:60]])  # fmt: skip
        extra = {x for r in mine for x in r.get("extra", [])}
        title = (f"{ARMS[arm]}: {len(mine)} trial(s) of {mine[0]['minutes']:g} min on tuning "
                 f"seed(s) {mine[0]['seeds']}, held-out scenes 2**31 + {TUNE_SCENES} + k"
                 + (f", extra overrides {sorted(extra)}" if extra else "")
                 if mine else f"{ARMS[arm]}: no trials yet")  # fmt: skip
        if rows:
            print_table(title, headers, rows)
            lines += [title, "", md_table(headers, rows), ""]
    write_json(args.out / "space.json", {a: {k: list(v) for k, v in s.items()}
                                         for a, s in SPACE.items()})  # fmt: skip
    note = ", ".join(
        f"{ARMS[a]}: trial {w['trial']} of {sum(r['arm'] == a for r in records)}, tuning AUC "
        f"{w['auc']:.3f}"
        for a, w in winners.items()
        if w
    )
    write_tuned_config(args.config_out, winners, f"winners: {note or 'none yet'}")
    lines.append(f"Winners written to {config_label(args.config_out)}: {note or 'none yet'}")
    text = "\n".join(lines) + "\n"
    (args.out / "d3_tune_summary.md").write_text(text)
    print(lines[-1])
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6, help="trials per arm in this part")
    ap.add_argument("--first-trial", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=5.0, help="training budget per trial")
    ap.add_argument("--seeds", type=int, default=1, help="tuning seeds per trial")
    ap.add_argument("--first-seed", type=int, default=1000, help="first tuning seed")
    ap.add_argument("--search-seed", type=int, default=0, help="seed of Tune's sampling")
    ap.add_argument("--eval-episodes", type=int, default=50, help="held-out scenes per snapshot")
    ap.add_argument("--snapshot-every-s", type=float, default=30.0)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--config-out", type=Path, default=TUNED_CONFIG, help="tuned config written")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "d3_tune")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d3_tune",
                    help="run directories and Tune's experiment state (not records)")  # fmt: skip
    ap.add_argument("--report-only", action="store_true", help="re-render from records only")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every trial (not shipped)")
    args = ap.parse_args(argv)
    (args.out / "trials").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_part(args)
    report(args)


if __name__ == "__main__":
    main()
