"""D5 tuning: Ray Tune with an ASHA scheduler on env-step budgets, the same budget for every cell
of the algorithm × system 2×2 (``_d5_cells.CELLS``).

One part = one cell = one ``tune.Tuner``:

* **Configurations** — ``--samples`` (≥ 8) per cell from Tune's ``BasicVariantGenerator`` over
  D3's search space (``d3_tune.SPACE``; GRPO's batch is ``groups_per_round`` ≥ 2 groups here,
  not ``episodes_per_env``), seeded by ``--search-seed``; the first configuration is the cell's
  best known block (``points_to_evaluate``): its named config's block, for GRPO the hand-changed
  ``grpo.lr=1e-3 grpo.epochs=4`` with 2 groups a round.
* **Budget** — every trial trains through :func:`evolve_envs.training.driver.run_train` until the
  learner has taken in ``--max-env-steps`` env steps (``run.max_env_steps``; ``--minutes`` is
  only a safety cap), on tuning seed ``--seed``.
* **Rung metric** — a thread evaluates each policy snapshot (``--snapshot-every-s``) as it
  appears on ``--eval-episodes`` held-out scenes ``held_out_seeds(n, 100_000)`` (mean action)
  and reports ``heldout_progress`` (the env's ground-truth progress at the end of each
  episode, ReachPlace's ``info["true_progress"]``: it moves before success does),
  ``heldout_return``, ``success`` and ``env_steps`` to Tune. ASHA (``time_attr=env_steps``,
  ``grace_period`` ``--max-env-steps / rf**(rungs-1)``, ``reduction_factor`` ``--rf``) stops
  the configurations behind at each rung.
* **Records** — ``<out>/trials/<cell>-t<i>.json`` (knobs, the curve so far, load; rewritten at
  every report, so a stopped trial keeps what it reached) and ``<out>/budget.json`` (the budget
  and scheduler; a part with another budget refuses to run into the same folder), and
  ``<out>/cells/<cell>.json`` once every trial of the part has finished (Tune ran all of them to
  the budget, a stop or an error; an interrupted part writes none, and its cell gets no winner
  until the part runs again). The report
  (``--report-only``) re-renders ``<out>/d5_tune_summary.md`` and ``<out>/winners.json`` from
  them alone.
* **Resuming** — a cell that needs more than one sitting (the synchronous DistRL cell: the
  barrier stops collection while a high sample ratio trains) is stopped with Ctrl-C and
  continued with ``--resume``: Tune restores the part's trials, the finished ones stay finished,
  the unfinished ones start again from nothing (their first run dir is kept beside as
  ``<name>.attempt<k>``), and ASHA's rungs start from the trial records (:class:`RecordedASHA`),
  since Tune restores trials, not its scheduler's rungs.

    python bench/d5_tune.py --cell distrl_async       # one part per cell (~45 min each)
    python bench/d5_tune.py --cell distrl_sync --resume   # go on with an interrupted part
    python bench/d5_tune.py --report-only
    python bench/d5_tune.py --report-only --write-configs evolve_envs/configs/distrl  # ship them
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from pathlib import Path
from typing import Any

from _common import ROOT, LoadLog, load_samples, machine_note, md_table
from _d3_runs import TUNE_SCENES, load_range, load_stats, ray_init, read_records, write_json
from _d5_cells import CELLS, D5_CELLS, LABELS, cell_config, cell_overrides
from d3_tune import SPACE, knob_overrides

#: The knobs of each algorithm searched in D5: D3's, with GRPO's rounds of 2-4 whole groups.
D5_SPACE: dict[str, dict[str, tuple[Any, ...]]] = {
    "distrl": dict(SPACE["distrl"]),
    "grpo": {
        **{k: v for k, v in SPACE["grpo"].items() if k != "grpo.episodes_per_env"},
        "grpo.group_size": ("choice", [4, 8]),
        "grpo.groups_per_round": ("choice", [2, 3, 4]),
    },
}


def start_knobs(cell: str) -> dict[str, Any]:
    """A cell's best known block (its named config's), the first configuration tried.

    >>> start_knobs("grpo_sync")["grpo.lr"], start_knobs("grpo_sync")["grpo.groups_per_round"]
    (0.001, 2)
    """
    from evolve_envs.training.config import load_train_config

    algo = CELLS[cell][0]
    cfg = load_train_config(cell_config(cell), {"algo": algo}).model_dump()
    knobs = {key: cfg[key.split(".")[0]][key.split(".")[1]] for key in D5_SPACE[algo]}
    if algo == "grpo" and knobs["grpo.groups_per_round"] is None:
        knobs["grpo.groups_per_round"] = 2  # rounds of at least two groups
    return knobs


def budget_of(args: argparse.Namespace) -> dict[str, Any]:
    """What every cell must share: env steps, configurations, scheduler, seeds, evaluation."""
    return {
        "max_env_steps": args.max_env_steps,
        "samples": args.samples,
        "scheduler": {"name": "ASHA", "time_attr": "env_steps", "metric": "heldout_progress",
                      "rf": args.rf, "rungs": args.rungs,
                      "grace_period": grace_period(args.max_env_steps, args.rf, args.rungs)},
        "seed": args.seed,
        "search_seed": args.search_seed,
        "eval_episodes": args.eval_episodes,
        "snapshot_every_s": args.snapshot_every_s,
        "extra": list(args.overrides),
    }  # fmt: skip


def grace_period(max_t: int, rf: int, rungs: int) -> int:
    """ASHA's first rung: ``max_t / rf**(rungs - 1)`` env steps.

    >>> grace_period(200_000, 3, 3)
    22222
    """
    return max(1, int(max_t // rf ** (rungs - 1)))


def rung_reached(env_steps: float, scheduler: dict[str, Any]) -> int:
    """How many of ASHA's rungs (``grace_period * rf**k`` env steps) a trial reached. A trial
    stops a few env steps past a rung, never exactly at it, so rungs, not raw env steps, rank
    how far trials went.

    >>> sched = {"grace_period": 22222, "rf": 3, "rungs": 3}
    >>> [rung_reached(n, sched) for n in (4_000, 23_206, 66_667, 200_001)]
    [0, 1, 2, 3]
    """
    marks = [scheduler["grace_period"] * scheduler["rf"] ** k for k in range(scheduler["rungs"])]
    return sum(env_steps >= m for m in marks)


def rung_values(curve: list[dict[str, float]], milestones: list[float]) -> dict[float, float]:
    """What ASHA recorded of a trial at each rung it reached: the held-out progress of its first
    report at or past the rung.

    >>> curve = [{"env_steps": 10, "heldout_progress": 0.1},
    ...          {"env_steps": 25, "heldout_progress": 0.3},
    ...          {"env_steps": 70, "heldout_progress": 0.5}]
    >>> rung_values(curve, [198, 66, 22])
    {66: 0.5, 22: 0.3}
    """
    values = {}
    for milestone in milestones:
        row = next((r for r in curve if r["env_steps"] >= milestone), None)
        if row is not None:
            values[milestone] = row["heldout_progress"]
    return values


def trial_index(trial_id: str) -> int:
    """A Tune trial's index in its part, the ``<i>`` of ``<cell>-t<i>.json``.

    >>> trial_index("90124_00003")
    3
    """
    return int(trial_id.split("_")[-1])


def _asha(records: Path, cell: str, **kwargs: Any) -> Any:
    """:class:`RecordedASHA` (built here: Ray is imported only where a part runs)."""
    from ray.tune.schedulers import ASHAScheduler

    class RecordedASHA(ASHAScheduler):
        """ASHA whose rungs start from the cell's trial records: a resumed part ranks the trials
        it runs against those that reported before the interruption."""

        def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
            super().on_trial_add(tune_controller, trial)
            path = records / f"{cell}-t{trial_index(trial.trial_id)}.json"
            if not path.is_file():
                return
            bracket = self._trial_info[trial.trial_id]
            rungs = dict(bracket._rungs)  # Ray's bracket: [(milestone, {trial_id: value})]
            curve = json.loads(path.read_text())["curve"]
            for milestone, value in rung_values(curve, list(rungs)).items():
                rungs[milestone][trial.trial_id] = self._metric_op * value

    return RecordedASHA(**kwargs)


def _evaluate(path: Path, episodes: int, evaluator: Any) -> dict[str, float]:
    from evolve_envs.training.evaluation import held_out_seeds, read_saved

    snap = read_saved(path).payload
    policy = evaluator.policy(snap["policy"])
    res = evaluator.run(policy, held_out_seeds(episodes, TUNE_SCENES))
    return {
        "time_s": float(snap["time_s"]),
        "env_steps": float(snap["counters"].get("env_steps_in", 0)),
        "updates": float(snap["counters"]["updates"]),
        "success": res.success_rate,
        "heldout_return": res.mean_return,
        "heldout_progress": res.mean_progress,
    }


def tune_trial(config: dict[str, Any]) -> None:
    """The Tune trainable: train in a thread, evaluate each snapshot as it appears, report it.
    Floats of the sampled knobs are kept to 3 significant digits."""
    from ray import tune

    from evolve_envs.training.driver import TrainOptions, run_train
    from evolve_envs.training.evaluation import HeldOutEvaluator, read_saved

    job = config["job"]
    knobs = {
        k: float(f"{v:.3g}") if isinstance(v, float) else v for k, v in config["knobs"].items()
    }
    trial = int(tune.get_context().get_trial_id().split("_")[-1])
    out = Path(job["out"])
    run_dir = Path(job["runs"]) / f"{job['cell']}-t{trial}"
    path = out / "trials" / f"{job['cell']}-t{trial}.json"
    overrides = [*cell_overrides(job["cell"]), *knob_overrides(knobs), *job["extra"],
                 f"run.seed={job['seed']}", f"run.max_env_steps={job['max_env_steps']}",
                 f"run.snapshot_every_s={job['snapshot_every_s']}", "run.tensorboard=false",
                 f"run.log_every_s={max(1.0, job['snapshot_every_s'])}"]  # fmt: skip
    record: dict[str, Any] = {
        "cell": job["cell"], "trial": trial, "knobs": knobs, "overrides": overrides,
        "config": job["config"], "curve": [],
    }  # fmt: skip
    if run_dir.exists():  # a resumed part starts an interrupted trial again from nothing
        attempt = 1 + len(list(run_dir.parent.glob(f"{run_dir.name}.attempt*")))
        run_dir.rename(run_dir.with_name(f"{run_dir.name}.attempt{attempt}"))
        record["restarts"] = attempt
    failed: list[BaseException] = []

    def train() -> None:
        try:
            run_train(TrainOptions(config=[job["config"]], algo=CELLS[job["cell"]][0],
                                   run_dir=run_dir, minutes=job["minutes"], overrides=overrides,
                                   progress_bar=False))  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - recorded and raised in the trial
            failed.append(exc)

    worker = threading.Thread(target=train, daemon=True)
    log = run_dir.parent / f"{run_dir.name}.load.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    seen: set[Path] = set()
    evaluator = None
    with LoadLog(log, every_s=30.0):
        worker.start()
        while True:
            alive = worker.is_alive()
            snaps = sorted((run_dir / "snapshots").glob("*.pt"), key=lambda p: p.stem.split("-")[1])
            for snap in [s for s in snaps if s not in seen]:
                try:
                    if evaluator is None:
                        evaluator = HeldOutEvaluator(read_saved(snap).cfg)
                    row = _evaluate(snap, job["eval_episodes"], evaluator)
                except (EOFError, RuntimeError, OSError):  # still being written: next pass
                    break
                seen.add(snap)
                record["curve"].append(row)
                record["load"] = load_stats(load_samples(log))
                write_json(path, record)
                tune.report(row)
            if not alive and seen.issuperset(snaps):
                break
            time.sleep(1.0)
    if evaluator is not None:
        evaluator.close()
    if failed:
        record["error"] = f"{type(failed[0]).__name__}: {failed[0]}"
        write_json(path, record)
        raise failed[0]


def run_part(args: argparse.Namespace) -> None:
    """One cell's configurations as one Tuner with ASHA."""
    import ray
    from ray import tune

    budget = budget_of(args)
    saved = args.out / "budget.json"
    if saved.is_file() and json.loads(saved.read_text()) != budget:
        raise SystemExit(f"{saved} holds another budget: every cell must share one (use --out)")
    write_json(saved, budget)
    part = args.runs / "parts" / f"{args.cell}.json"  # the cell's Tune experiment, for --resume
    mine = sorted((args.out / "trials").glob(f"{args.cell}-t*.json"))
    if args.resume and not part.is_file():
        raise SystemExit(f"{args.cell}: no part to resume ({part} is missing)")
    if not args.resume and mine:
        raise SystemExit(f"{args.cell}: {len(mine)} trial record(s) of an earlier part are "
                         f"in {args.out / 'trials'}: --resume it, or move them away")  # fmt: skip
    algo = CELLS[args.cell][0]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    space = {k: getattr(tune, kind)(*a) for k, (kind, *a) in D5_SPACE[algo].items()}
    job = {"cell": args.cell, "config": str(cell_config(args.cell)), "out": str(args.out.resolve()),
           "runs": str(args.runs.resolve() / stamp), "minutes": args.minutes,
           **{k: budget[k] for k in ("max_env_steps", "seed", "eval_episodes",
                                      "snapshot_every_s", "extra")}}  # fmt: skip
    from evolve_envs.training.config import load_train_config

    w = load_train_config(cell_config(args.cell)).workers
    bundles = [{"CPU": 1.0}] + [{"CPU": w.num_cpus}] * w.num_workers
    ray_init(math.ceil(args.concurrent * sum(b["CPU"] for b in bundles)))
    trainable = tune.with_resources(tune_trial, tune.PlacementGroupFactory(bundles))
    try:
        if args.resume:
            name = json.loads(part.read_text())["tune_run"]
            print(f"{args.cell}: resuming {name}", flush=True)
            tuner = tune.Tuner.restore(str(args.runs.resolve() / "tune" / name), trainable,
                                       resume_unfinished=True)  # fmt: skip
        else:
            name = f"d5_tune-{args.cell}-{stamp}"
            write_json(part, {"cell": args.cell, "tune_run": name})
            tuner = _new_tuner(args, trainable, job, space, name)
        grid = tuner.fit()
        for res in grid:
            if res.error is not None:
                print(f"a {args.cell} trial failed: {str(res.error).splitlines()[0]}", flush=True)
    finally:
        ray.shutdown()
    # After Ctrl-C, Tune stops the running trials and the returned grid counts them terminated;
    # the experiment state it saved before that stop holds what had really finished.
    status = [t.status for t in tune.ExperimentAnalysis(grid.experiment_path).trials]
    terminated, errors = status.count("TERMINATED"), status.count("ERROR")
    if terminated + errors < args.samples:
        raise SystemExit(f"{args.cell}: {terminated + errors} of {args.samples} trials "
                         "finished; the cell is incomplete and has no winner (go on with "
                         "--resume)")  # fmt: skip
    write_json(args.out / "cells" / f"{args.cell}.json",
               {"cell": args.cell, "tune_run": name, "trials": args.samples,
                "terminated": terminated, "errors": errors})  # fmt: skip


def _new_tuner(args: argparse.Namespace, trainable: Any, job: dict[str, Any],
               space: dict[str, Any], name: str) -> Any:  # fmt: skip
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    sched = budget_of(args)["scheduler"]
    return tune.Tuner(
        trainable,
        param_space={"job": job, "knobs": space},
        tune_config=tune.TuneConfig(
            num_samples=args.samples,
            max_concurrent_trials=args.concurrent,
            search_alg=BasicVariantGenerator(
                points_to_evaluate=[{"knobs": start_knobs(args.cell)}],
                random_state=args.search_seed,
            ),
            scheduler=_asha(
                (args.out / "trials").resolve(),
                args.cell,
                time_attr="env_steps",
                metric=sched["metric"],
                mode="max",
                max_t=args.max_env_steps,
                grace_period=sched["grace_period"],
                reduction_factor=args.rf,
            ),
        ),
        run_config=tune.RunConfig(
            name=name, verbose=0, storage_path=str(args.runs.resolve() / "tune")
        ),
    )


def report(args: argparse.Namespace) -> str:
    """Per cell: every configuration, how far ASHA let it go, its last rung metric; the winner
    (the furthest rung, then the highest held-out progress there). From the records alone."""
    budget = json.loads((args.out / "budget.json").read_text())
    records = read_records(args.out / "trials")
    lines = [f"D5 tuning on ReachPlace, {machine_note(load_range(records))}", "",
             f"Budget per cell (the same for every cell): {budget['samples']} configurations, "
             f"up to {budget['max_env_steps']} env steps each, ASHA on held-out progress "
             f"(reduction factor {budget['scheduler']['rf']}, first rung "
             f"{budget['scheduler']['grace_period']} env steps), tuning seed {budget['seed']}, "
             f"{budget['eval_episodes']} held-out scenes per snapshot", ""]  # fmt: skip
    winners: dict[str, Any] = {}
    headers = ["trial", "knobs", "env steps reached (k)", "held-out progress", "success",
               "stopped"]  # fmt: skip
    for cell in D5_CELLS:
        mine = sorted((r for r in records if r["cell"] == cell), key=lambda r: r["trial"])
        if not mine:
            lines += [f"{LABELS[cell]}: no trials yet", ""]
            continue
        if not (args.out / "cells" / f"{cell}.json").is_file():  # a part that did not finish
            lines += [f"{LABELS[cell]}: {len(mine)} trial record(s) of a part that did not "
                      "finish; no winner", ""]  # fmt: skip
            continue
        done = [r for r in mine if r["curve"] and "error" not in r]
        sched = budget["scheduler"]
        best = max(
            done,
            key=lambda r: (
                rung_reached(r["curve"][-1]["env_steps"], sched),
                r["curve"][-1]["heldout_progress"],
            ),
            default=None,
        )
        if best is not None:
            winners[cell] = {"trial": best["trial"], "knobs": best["knobs"],
                             "env_steps": best["curve"][-1]["env_steps"]}  # fmt: skip
        rows = []
        for r in mine:
            last = r["curve"][-1] if r["curve"] else {}
            reached = last.get("env_steps", 0.0)
            stopped = ("error" if "error" in r else
                       "budget" if reached >= budget["max_env_steps"] else "rung")  # fmt: skip
            knobs = ", ".join(f"{k.split('.')[1]} {v}" for k, v in r["knobs"].items())
            rows.append([f"{r['trial']}{' **(winner)**' if r is best else ''}", knobs,
                         f"{reached / 1e3:.1f}", f"{last.get('heldout_progress', math.nan):.3f}",
                         f"{last.get('success', math.nan):.3f}", stopped])  # fmt: skip
        title = f"{LABELS[cell]} ({cell}): {len(mine)} configuration(s)"
        lines += [title, "", md_table(headers, rows), ""]
    ranked = sum(1 for c in winners if any(r["cell"] == c for r in records))
    lines.append(f"Cells with a winner: {ranked} of {len(D5_CELLS)}; a winner is tuned only as far "
                 "as its budget could rank (see the rung column)")  # fmt: skip
    write_json(args.out / "winners.json", {"budget": budget, "winners": winners})
    text = "\n".join(lines) + "\n"
    (args.out / "d5_tune_summary.md").write_text(text)
    print(text)
    return text


def write_cell_configs(winners: dict[str, Any], config_dir: Path) -> list[Path]:
    """Write each cell's winning knobs into its named config's block (DistRL's cells into
    ``distrl:``, GRPO's into ``grpo:``; a cell without a winner keeps its block), the comment
    at the head kept and one line added saying where the blocks came from; validated after
    writing. Returns the files written."""
    import yaml

    from evolve_envs.training.config import load_train_config

    written = []
    for system in ("async", "sync"):
        path = config_dir / f"reach_place_{system}.yaml"
        text = path.read_text()
        head = [line for line in text.splitlines() if line.startswith("#")]
        head = [line for line in head if not line.startswith("# D5 tuning winners:")]
        data = yaml.safe_load(text)
        notes = []
        for cell, (_, cell_system) in CELLS.items():
            if cell_system != system or cell not in winners:
                continue
            for override in knob_overrides(winners[cell]["knobs"]):
                key, _, value = override.partition("=")
                block, name = key.split(".")
                data[block][name] = yaml.safe_load(value)
            notes.append(f"{cell} trial {winners[cell]['trial']}")
        if notes:
            head.append(f"# D5 tuning winners: {', '.join(notes)} (bench/d5_tune.py)")
        path.write_text("\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False))
        load_train_config(path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", choices=D5_CELLS, help="the part to run (one cell)")
    ap.add_argument("--samples", type=int, default=8, help="configurations per cell")
    ap.add_argument("--max-env-steps", type=int, default=200_000, help="env-step budget")
    ap.add_argument("--rf", type=int, default=3, help="ASHA's reduction factor")
    ap.add_argument("--rungs", type=int, default=3, help="ASHA's rungs up to the budget")
    ap.add_argument("--minutes", type=float, default=60.0, help="safety cap per trial")
    ap.add_argument("--concurrent", type=int, default=2, help="trials at once")
    ap.add_argument("--seed", type=int, default=1000, help="tuning seed (race seeds: 100+)")
    ap.add_argument("--search-seed", type=int, default=0, help="seed of Tune's sampling")
    ap.add_argument("--eval-episodes", type=int, default=30, help="held-out scenes a snapshot")
    ap.add_argument("--snapshot-every-s", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "d5_tune")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d5_tune")
    ap.add_argument("--resume", action="store_true", help="go on with the cell's interrupted part")
    ap.add_argument("--report-only", action="store_true", help="re-render from records only")
    ap.add_argument(
        "--write-configs",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the winners into DIR/reach_place_async.yaml and "
        "reach_place_sync.yaml (the shipped ones: evolve_envs/configs/distrl)",
    )
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every trial of every cell")
    args = ap.parse_args(argv)
    (args.out / "trials").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        if args.cell is None:
            ap.error("--cell is required unless --report-only")
        run_part(args)
    report(args)
    if args.write_configs is not None:
        winners = json.loads((args.out / "winners.json").read_text())["winners"]
        for path in write_cell_configs(winners, args.write_configs):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
