"""R2: a progress model fitted here, against the rule models: calibration, latency and DistRL.

Phases (each writes its records under ``--out``, default ``bench/results/r2``):

* ``record``: ReachPlace episodes of the scripted behaviours (``play_behaviours``): a training
  recording (reset seeds from 0) and a held-out one (reset seeds from 10 000, so no scene is in
  both);
* ``fit``: ``evolve-envs fit-reward`` on the training recording (time, size, the report);
* ``calibrate``: ``evolve-envs calibrate`` of the held-out recording with the fitted model (by
  path), ``mock:reach_place`` (right), ``mock:reach_place_hackable`` (gameable) and
  ``mock:random``;
* ``latency``: P4's closed loop (``p4_service.load``: ``POST /pairwise-critic``, two 256² JPEG
  frames) against the ``fitted`` backend on the CPU, 1 and 8 clients;
* ``alarm``: the demo's random, gaming and solving policies under the fitted model and the two
  rules, with the hacking alarm, on scenes none was fitted on;
* ``separation``: every fitted model's score of the last frame of placed blocks, of near
  misses (``play_behaviours``' ``near_miss``: the block held just short of the zone) and of
  blocks carried astray (``astray``), and how many of each it judges done (and how many of
  those with the block outside the zone: two or more is a hole), on scenes no recording holds
  (reset seeds from ``--probe-seed``, 20 000); ``--behaviours`` probes other behaviours of
  ``play_behaviours`` (``oscillate``: the block carried in and out across the zone's edge,
  ending outside; ``on_distractor``: the block held on the distractor);
* ``distrl``: ``evolve-envs train`` for ``--minutes`` per run, ``--seeds`` seeds of each reward
  source, interleaved: the fitted model (embedded ``fitted`` backend; ``fitted_cap03``: the fit
  of ``fit --failure-cap 0.3``; ``fitted_noisy``: the fit of ``fit --data train-noisy``, half the
  expert's episodes played with noise; ``fitted_nearmiss``: the fit of ``fit --data
  train-nearmiss``, the training episodes and 20 near misses; ``fitted_gap``: the fit of ``fit
  --done-gap``, a success's frames before its last labelled below the failure cap;
  ``fitted_frame``: the fit of ``fit --done-on frame``, the default fit whose done threshold is
  picked on frames, a success's last frame against every other frame; ``fitted_big_frame``: the
  fit of ``fit --data train-big --done-on frame``, five times the expert's episodes;
  ``fitted_astray_frame``: the fit of ``fit --data train-big-astray --done-on frame``, the big
  recording and 100 blocks carried astray), the
  ``reach_place`` rule, and the env's own success flag alone (``reward_model.enable=false``,
  reward 1 at success). Every snapshot is evaluated on ``--eval-episodes`` held-out scenes
  (mean action, the env's success flag; ``held_out_seeds(n, --scene-offset)``, offset 0 by
  default, kept in the record as ``scene_offset``); the record keeps the curve, and the report
  compares the arms at the fewest env steps any run collected;
* ``sampled``: the last 3 snapshots of every DistRL record scored again with sampled actions
  (``--eval-episodes`` held-out scenes from ``--scene-offset``, the run's seed), kept in the
  record;
* ``endings``: where the policies end: the last snapshot of every DistRL record played with the
  mean action on ``--eval-episodes`` held-out scenes (from ``--scene-offset``); per run, the
  successes and, over the failed episodes, the env's true progress at the end and the last
  frame's score under the ``reach_place`` rule, the default fit and the ``--done-gap`` fit,
  and for a fitted arm how many of those endings its own model judges done, and how many of
  them with the block far from the zone (the rule under 0.9; up to four of those frames in
  ``<out>/endings-<record>.png``), and the same count under each fit of ``JUDGES``
  (``failed_done_far_by``); ``--arms`` picks the records, merged into ``<out>/endings.json``;
* ``report``: the records' table and the arms' comparison at equal env steps; with ``--window
  LO HI`` (repeatable) also, per run, the held-out success averaged over env steps [LO, HI]
  (step interpolation of the snapshot curve, ``_d5_cells.area``; none for a run that stopped
  before HI), per arm the mean over seeds with a 95 % bootstrap interval, per fitted arm its
  ratio to ``rule`` (paired bootstrap interval; Confirmed when the lower end is at least 0.8,
  consistent when only the point is, not met below) and its difference from ``sparse``
  (bootstrap interval, exact sign-flip p; Confirmed when p <= 0.05 and positive), and every
  run's env steps to 50 % held-out success (bench/plans/r2_confirm.md).

    python bench/r2_fitted_reward.py record fit calibrate latency
    python bench/r2_fitted_reward.py distrl --seeds 3 --minutes 3
    python bench/r2_fitted_reward.py report
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, TASK, machine_note, scene_frames
from _d3_runs import config_label
from _r2_judges import (
    FITTED,
    PROBE_SEED,
    SEPARATION_BEHAVIOURS,
    endings,
    model_hash,
    separation,
)


def _fitted(suffix: str) -> Callable[[str], tuple[str, list[str]]]:
    return lambda model: ("reach_place_fitted", [
        f"reward_model.embedded_backend_kwargs.ckpt_path={model}{suffix}",
        "reward_model.embedded_backend_kwargs.device=cpu",
    ])  # fmt: skip


#: reward source -> (config, overrides); the configs differ in the reward_model block alone
ARMS = {
    **{arm: _fitted(suffix) for arm, suffix in FITTED.items()},
    "rule": lambda model: ("reach_place", ["reward_model.alarm.enable=true"]),
    "sparse": lambda model: ("reach_place", ["reward_model.enable=false"]),
}
TRAIN = {"task": 60, "distractor": 20, "random": 20}
#: the same 100 scenes, half of the expert's episodes played with noise (off the expert's path)
TRAIN_NOISY = {"task": 30, "noisy": 30, "distractor": 20, "random": 20}
#: the training recording's episodes and 20 near misses (the block held just short of the zone)
TRAIN_NEARMISS = {"task": 60, "distractor": 20, "random": 20, "near_miss": 20}
#: five times the expert's episodes (reset seeds 0-399): 300 done frames to fit done on, not 60
TRAIN_BIG = {"task": 300, "distractor": 50, "random": 50}
#: the big recording and 100 blocks carried astray (held away from the zone, edges included),
#: the failure a policy trained on the big fit found (``endings``)
TRAIN_BIG_ASTRAY = {**TRAIN_BIG, "astray": 100}
HELD = {"task": 20, "distractor": 10, "random": 10}


def _uptime() -> str:
    return "load avg {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def record(out: Path, runs: Path, scale: float = 1.0) -> None:
    from evolve_envs import make_env
    from evolve_envs.envs.synthetic import play_behaviours

    recordings = (("train", TRAIN, 0), ("train-noisy", TRAIN_NOISY, 0),
                  ("train-nearmiss", TRAIN_NEARMISS, 0), ("train-big", TRAIN_BIG, 0),
                  ("train-big-astray", TRAIN_BIG_ASTRAY, 0),
                  ("held_out", HELD, 10_000))  # fmt: skip
    for name, counts, seed in recordings:
        counts = {k: max(1, round(n * scale)) for k, n in counts.items()}
        target = runs / name
        if target.exists():
            print(f"{target} exists; kept")
            continue
        env = make_env({"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 30},
                        "record": {"dir": str(target), "camera": "image"}})  # fmt: skip
        try:
            play_behaviours(env, counts, seed=seed)
        finally:
            env.close()
        print(f"recorded {sum(counts.values())} episodes into {target}")


def fit(
    out: Path,
    runs: Path,
    epochs: int,
    failure_cap: float | None = None,
    data: str = "train",
    gap: bool = False,
    done_on: str = "episode",
) -> None:
    cap = "" if failure_cap is None else "-cap" + str(failure_cap).replace(".", "")
    on = "" if done_on == "episode" else f"-{done_on}"
    model = runs / f"model{cap}{data[len('train') :]}{'-gap' if gap else ''}{on}"
    before = _uptime()
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "evolve_envs.cli.main", "fit-reward", str(runs / data),
           "--out", str(model), "--epochs", str(epochs), "--no-progress",
           *([] if failure_cap is None else ["--failure-cap", str(failure_cap)]),
           *(["--done-gap"] if gap else []), "--done-on", done_on]  # fmt: skip
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    report = json.loads((model / "report.json").read_text())
    keep = {k: report[k] for k in ("content_hash", "episodes", "held_out_ids", "done_threshold",
                                   "held_out", "train", "losses", "fit_s", "parameters",
                                   "size_bytes", "options")}  # fmt: skip
    keep.update(command=" ".join(cmd[1:]), wall_s=wall, load_before=before, load_after=_uptime(),
                machine=machine_note())  # fmt: skip
    (out / f"fit{_suffix(str(model))}.json").write_text(json.dumps(keep, indent=1) + "\n")
    print(f"fit: {wall:.0f} s, held-out {report['held_out']}")


def _suffix(model: str) -> str:
    """``""`` for the default model, else ``-<folder>`` (records of other fits side by side)."""
    name = Path(model).name
    return "" if name == "model" else f"-{name}"


def calibrate(out: Path, model: str, runs: Path) -> None:
    from evolve_envs.cli.calibrate import calibrate as run

    services = [model, "mock:reach_place", "mock:reach_place_hackable", "mock:random"]
    report = run([runs / "held_out"], services, max_frames=32)
    rows = {}
    for spec, body in report["services"].items():
        o = body["overall"]
        rows["fitted" if spec == model else spec] = {
            k: o[k]
            for k in (
                "episodes",
                "scored",
                "successes",
                "done",
                "backend_done",
                "best_threshold",
                "voc",
                "progress_at_success",
                "max_progress_on_failure",
                "failures_judged_high",
                "successes_judged_low",
                "latency_p50_s",
            )  # fmt: skip
        }
    body = {"recording": config_label(runs / "held_out"), "threshold": report["threshold"],
            "services": rows, "machine": machine_note()}  # fmt: skip
    body["model"] = model
    text = json.dumps(body, indent=1, default=str) + "\n"
    (out / f"calibrate{_suffix(model)}.json").write_text(text)
    for name, r in rows.items():
        print(f"{name}: VOC {r['voc']}, done P/R {r['done']['precision']}/{r['done']['recall']}, "
              f"backend done {r['backend_done']}")  # fmt: skip


def latency(out: Path, seconds: float, runs: Path) -> None:
    from p4_service import load

    from evolve_envs.reward.clients.frame_encoding import encode_jpeg_b64
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    frames = scene_frames(8, 256, seed=3)
    enc = [encode_jpeg_b64(f, 85) for f in frames]
    bodies = [json.dumps({"task": TASK, "image_a": enc[k], "image_b": enc[(k + 1) % 8]}).encode()
              for k in range(8)]  # fmt: skip
    rows = {}
    model = str(runs / "model")
    services = (("fitted", "fitted", {"ckpt_path": model, "device": "cpu"}),
                ("mock:reach_place", "mock", {"rule": "reach_place"}))  # fmt: skip
    for name, backend, kwargs in services:
        with EmbeddedService(backend, kwargs, startup_timeout=120) as svc:
            for clients in (1, 8):
                rows[f"{name}|{clients}"] = {**load(svc.url, bodies, clients, seconds),
                                             "load": _uptime()}  # fmt: skip
    (out / "latency.json").write_text(json.dumps({"rows": rows, "machine": machine_note()},
                                                 indent=1) + "\n")  # fmt: skip
    for k, v in rows.items():
        print(k, {m: round(v[m], 2) for m in ("req_s", "p50_ms", "p99_ms", "batch")})


#: what a run's summary says about its last log window (the alarm, the model's judgement)
LAST_KEYS = ("episodes", "return", "success", "model_progress", "model_done",
             "model_done_precision", "alarm_firing", "env_steps_in")  # fmt: skip


def _last(summary: dict) -> dict:
    return {k: summary.get("last", {}).get(k) for k in LAST_KEYS} | {
        "env_steps": summary.get("counters", {}).get("env_steps_in")}  # fmt: skip


def alarm(out: Path, episodes: int, model: str) -> None:
    """The demo's three scripted policies (random, gaming, solving) under the fitted model and
    the right and gameable rules, with the hacking alarm, on scenes the model was not fitted on."""
    import dataclasses

    from evolve_envs.cli.demo import play_reach_place

    rows = []
    for name, rule, model_dir in (("fitted", "", Path(model)), ("right", "reach_place", None),
                                  ("gameable", "reach_place_hackable", None)):  # fmt: skip
        for g in play_reach_place(rule, episodes, name=name, model_dir=model_dir, fresh=True):
            rows.append(dataclasses.asdict(g))
            mean = sum(g.model_progress) / g.episodes
            print(f"{name:9s} {g.policy:8s} model progress {mean:5.1f}"
                  f"  true {sum(g.true_progress) / g.episodes:5.1f}  success {g.success}/"
                  f"{g.episodes}  model done {g.model_done}  alarm {g.alarm_text()}")  # fmt: skip
    body = {"episodes_per_policy": episodes, "groups": rows, "machine": machine_note()}
    body["model"] = model
    (out / f"alarm{_suffix(model)}.json").write_text(json.dumps(body, indent=1, default=str) + "\n")


def distrl(
    out: Path,
    seeds: int,
    minutes: float,
    episodes: int,
    first_seed: int,
    arms: list[str],
    runs: Path,
    env_steps: int | None = None,
    settings: tuple[str, ...] = (),
    scene_offset: int = 0,
) -> None:
    from d3_learning_curves import evaluate_run, last_minute

    from evolve_envs.training.driver import TrainOptions, run_train

    model = str(runs / "model")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for seed in range(first_seed, first_seed + seeds):
        for arm in arms:
            extra = ARMS[arm]
            run_dir = runs / "distrl" / stamp / f"{arm}-s{seed}"
            before = _uptime()
            config, overrides = extra(model)
            run_train(TrainOptions(
                config=[config], algo="distrl", run_dir=run_dir, minutes=minutes,
                overrides=[f"run.seed={seed}", "run.snapshot_every_s=30", "run.log_every_s=30",
                           "run.tensorboard=false", *overrides,
                           *([f"run.max_env_steps={env_steps}"] if env_steps else []),
                           *settings],
                progress_bar=False, log=io.StringIO(),
            ))  # fmt: skip
            curve = evaluate_run(run_dir, episodes, scene_offset)
            summary = json.loads((run_dir / "summary.json").read_text())
            record = {
                "arm": arm, "seed": seed, "minutes": minutes, "max_env_steps": env_steps,
                "settings": list(settings), "scene_offset": scene_offset, "curve": curve,
                "counters": summary.get("counters", {}),
                "train_last_minute": last_minute(run_dir / "metrics.csv"),
                "last": _last(summary),
                "model": model_hash(model + FITTED[arm]) if arm in FITTED else None,
                "load_before": before, "load_after": _uptime(),
                "run_dir": config_label(run_dir),
            }  # fmt: skip
            (out / f"distrl-{arm}-s{seed}.json").write_text(json.dumps(record, indent=1) + "\n")
            last = curve[-1] if curve else {}
            print(
                f"{arm} seed {seed}: held-out {last.get('success')} at "
                f"{last.get('env_steps')} env steps ({before} -> {_uptime()})",
                flush=True,
            )


def sampled(out: Path, episodes: int, scene_offset: int = 0) -> None:
    """Score the last 3 snapshots of every DistRL record in ``out`` again with sampled actions
    (a torch RNG seeded with the run's seed, the held-out scenes from ``scene_offset``), beside
    the mean-action curve; kept in the record as ``sampled_last3`` (the offset as
    ``sampled_scene_offset``). A record that has them is skipped."""
    from d5_race import sampled_last

    for path in sorted(out.glob("distrl-*.json")):
        record = json.loads(path.read_text())
        if "sampled_last3" in record or not record["curve"]:
            continue
        if record.get("scene_offset", 0) != scene_offset:
            print(f"{path.name}: its curve was scored on scenes from offset "
                  f"{record.get('scene_offset', 0)}, these sampled actions on scenes from offset "
                  f"{scene_offset}")  # fmt: skip
        record["sampled_last3"] = sampled_last(ROOT / record["run_dir"], episodes, record["seed"],
                                               offset=scene_offset)  # fmt: skip
        record["sampled_episodes"] = episodes
        record["sampled_scene_offset"] = scene_offset
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{path.name}: sampled actions, last 3 snapshots {record['sampled_last3']}")


def _success_at(curve: list[dict], steps: float) -> float:
    """Held-out success at ``steps`` env steps: the mean of the last three snapshots at or below
    it (one snapshot swings by several points)."""
    rows = [r["success"] for r in curve if r["env_steps"] <= steps]
    return float(sum(rows[-3:]) / len(rows[-3:])) if rows else math.nan


def report(out: Path, windows: list[tuple[int, int]] | None = None) -> None:
    from _stats import bootstrap_ci

    everything = [json.loads(p.read_text()) for p in sorted(out.glob("distrl-*.json"))]
    records = [r for r in everything if r["curve"]]
    if not records:
        print("no DistRL records")
        if windows and everything:  # runs that stopped before a snapshot are still listed
            _windows(everything, windows)
        return
    equal = min(r["curve"][-1]["env_steps"] for r in records)
    print(f"equal env steps: {equal:.0f} (the fewest any run collected)")
    print(
        "| reward source | seed | env steps | held-out at equal steps | final / best snapshot "
        "| training success, last minute | model progress | alarm firing (last window) "
        "| learner updates |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(records, key=lambda r: (r["seed"], list(ARMS).index(r["arm"]))):
        last, best = r["curve"][-1]["success"], max(c["success"] for c in r["curve"])
        end = r.get("last", {})
        progress, alarm = end.get("model_progress"), end.get("alarm_firing")
        print(
            f"| {r['arm']} | {r['seed']} | {r['curve'][-1]['env_steps']:,.0f} "
            f"| {_success_at(r['curve'], equal):.2f} | {last:.2f} / {best:.2f} "
            f"| {r['train_last_minute'][1]:.2f} "
            f"| {'–' if progress is None or progress != progress else f'{progress:.1f} %'} "
            f"| {'–' if alarm is None or alarm != alarm else f'{alarm:.2f}'} "
            f"| {r.get('counters', {}).get('updates', '–')} |"
        )
    at: dict[str, dict[int, float]] = {}
    for arm in ARMS:
        mine = sorted((r for r in records if r["arm"] == arm), key=lambda r: r["seed"])
        at[arm] = {r["seed"]: _success_at(r["curve"], equal) for r in mine}
        vals = list(at[arm].values())
        if not vals:
            continue
        lo, hi = bootstrap_ci(vals)
        alarm = [r.get("last", {}).get("alarm_firing") for r in mine]
        steps = [int(r["curve"][-1]["env_steps"]) for r in mine]
        per_seed = [round(v, 3) for v in vals]
        print(
            f"{arm}: held-out success (mean of the last 3 snapshots at {equal:.0f} steps) "
            f"per seed {per_seed}, mean {sum(vals) / len(vals):.3f} [{lo:.3f}, {hi:.3f}]; "
            f"env steps {steps}; alarm firing at the end {alarm}"
        )
    pairs = [(m, "rule") for m in FITTED] + [(a, "sparse") for a in [*FITTED, "rule"]]
    _pairs(at, pairs, "mean action")
    drawn = {arm: {r["seed"]: sum(r["sampled_last3"]) / len(r["sampled_last3"])
                   for r in records if r["arm"] == arm and r.get("sampled_last3")}
             for arm in ARMS}  # fmt: skip
    for arm, per in drawn.items():
        if per:
            vals = list(per.values())
            lo, hi = bootstrap_ci(vals)
            print(f"{arm}: sampled actions, mean of the last 3 snapshots, per seed "
                  f"{[round(v, 3) for v in vals]}, mean {sum(vals) / len(vals):.3f} "
                  f"[{lo:.3f}, {hi:.3f}]")  # fmt: skip
    _pairs(drawn, pairs, "sampled actions")
    if windows:
        _windows(everything, windows)


def _pairs(at: dict[str, dict[int, float]], pairs: list[tuple[str, str]], label: str) -> None:
    from _stats import bootstrap_ci, sign_flip_p

    for a, b in pairs:
        seeds = sorted(set(at.get(a, {})) & set(at.get(b, {})))
        if not seeds:
            continue
        d = [at[a][s] - at[b][s] for s in seeds]
        lo, hi = bootstrap_ci(d)
        ma = sum(at[a][s] for s in seeds) / len(seeds)
        mb = sum(at[b][s] for s in seeds) / len(seeds)
        ratio = f", ratio {ma / mb:.2f}" if mb > 0 else ""
        print(
            f"{label}: {a} - {b}: {sum(d) / len(d):+.3f} [{lo:+.3f}, {hi:+.3f}] over seeds "
            f"{seeds}, sign-flip p {sign_flip_p(d):.3f}{ratio}"
        )


#: bench/plans/r2_confirm.md's bars: fitted ÷ rule at least this, fitted − sparse at this p
RATIO_BAR, P_BAR = 0.8, 0.05
#: the seeds bench/plans/r2_confirm.md runs (600-605): a verdict needs every one of them
PLAN_SEEDS = 6


def window_mean(curve: list[dict], lo: float, hi: float) -> float:
    """Held-out success averaged over env steps [``lo``, ``hi``] by step interpolation of the
    snapshot curve (``_d5_cells.area``: each snapshot's success holds until the next), so it does
    not depend on how many snapshots a run took; NaN for a run that stopped before ``hi``.

    >>> curve = [{"env_steps": 0, "success": 0.0}, {"env_steps": 100, "success": 0.5},
    ...          {"env_steps": 150, "success": 1.0}, {"env_steps": 210, "success": 0.0}]
    >>> window_mean(curve, 100, 200), window_mean(curve, 0, 200), window_mean(curve, 100, 300)
    (0.75, 0.375, nan)
    """
    from _d5_cells import area

    if not curve or curve[-1]["env_steps"] < hi:
        return math.nan
    below = lo * area(curve, "env_steps", lo) if lo > 0 else 0.0
    return (hi * area(curve, "env_steps", hi) - below) / (hi - lo)


def _num(x: float, spec: str = ".3f") -> str:
    """``x`` formatted, "–" for NaN (no value)."""
    return "–" if math.isnan(x) else format(x, spec)


def _env_steps(record: dict) -> float:
    """The env steps a run took: its last snapshot's, else its counters' (0 for none)."""
    if record["curve"]:
        return float(record["curve"][-1]["env_steps"])
    return float(record.get("counters", {}).get("env_steps_in") or 0)


def _windows(records: list[dict], windows: list[tuple[int, int]]) -> None:
    """The report's part for ``--window`` (see the module docstring): every record, those
    without a curve too, so that no run is left out silently."""
    from _d5_cells import first_reach
    from _stats import bootstrap_ci

    runs = sorted(records, key=lambda r: (list(ARMS).index(r["arm"]), r["seed"]))
    offsets = sorted({r.get("scene_offset", 0) for r in runs})
    print(f"\nheld-out scenes from reset seed offset {', '.join(f'{o:,}' for o in offsets)}"
          + (" (the runs differ)" if len(offsets) > 1 else ""))  # fmt: skip
    for lo, hi in windows:
        print(f"\nwindow [{lo:,}, {hi:,}] env steps: held-out success averaged over it (step "
              "interpolation of the snapshot curve)")  # fmt: skip
        print("| reward source | seed | held-out scenes from | env steps | window mean |")
        print("|---|---|---|---|---|")
        at: dict[str, dict[int, float]] = {}
        stopped: dict[str, list[str]] = {}
        for r in runs:
            value, steps = window_mean(r["curve"], lo, hi), _env_steps(r)
            if math.isnan(value):
                stopped.setdefault(r["arm"], []).append(f"seed {r['seed']} at {steps:,.0f}")
                shown = f"none: stopped before {hi:,}"
            else:
                at.setdefault(r["arm"], {})[r["seed"]] = value
                shown = f"{value:.3f}"
            print(f"| {r['arm']} | {r['seed']} | {r.get('scene_offset', 0):,} | {steps:,.0f} "
                  f"| {shown} |")  # fmt: skip
        for arm in ARMS:
            if arm not in at and arm not in stopped:
                continue
            vals = list(at.get(arm, {}).values())
            mean = sum(vals) / len(vals) if vals else math.nan
            ci = bootstrap_ci(vals)
            short = "; ".join(stopped.get(arm, [])) or "none"
            print(f"{arm} [{lo:,}, {hi:,}]: per seed {[round(v, 3) for v in vals]}, mean "
                  f"{_num(mean)} [{_num(ci[0])}, {_num(ci[1])}] (95 % bootstrap over seeds); "
                  f"stopped before {hi:,} env steps: {short}")  # fmt: skip
        for arm in FITTED:
            if arm not in at and arm not in stopped:
                continue
            for other in ("rule", "sparse"):
                if other in at or other in stopped:
                    print(_verdict(arm, other, at, stopped, (lo, hi)))
    print("\nenv steps to 50 % held-out success (the first snapshot at or above 0.5; secondary)")
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        reach = [(r["seed"], first_reach(r["curve"], "env_steps", 0.5)) for r in mine]
        shown = [f"seed {s}: {'not reached' if math.isinf(x) else f'{x:,.0f}'}" for s, x in reach]
        never = sum(math.isinf(x) for _, x in reach)
        print(f"{arm}: {'; '.join(shown)}; not reached: {never} of {len(reach)}")


def _verdict(
    arm: str,
    other: str,
    at: dict[str, dict[int, float]],
    stopped: dict[str, list[str]],
    window: tuple[int, int],
) -> str:
    """One line: ``arm`` ÷ ``rule`` (ratio of the arm means, paired bootstrap interval) or
    ``arm`` − ``sparse`` (paired difference, bootstrap interval, exact sign-flip p) over the
    seeds both have, and the plan's verdict; "not confirmed" where a run of either stopped
    before the window's end."""
    from _stats import bootstrap_ci, ratio_ci, sign_flip_p

    seeds = sorted(set(at.get(arm, {})) & set(at.get(other, {})))
    a = [at[arm][s] for s in seeds]
    b = [at[other][s] for s in seeds]
    short = [f"{n} {x}" for n in (arm, other) for x in stopped.get(n, [])]
    where = f"[{window[0]:,}, {window[1]:,}]"
    if other == "rule":
        ma = sum(a) / len(a) if a else math.nan
        mb = sum(b) / len(b) if b else math.nan
        ratio = ma / mb if mb > 0 else math.nan
        lo, hi = ratio_ci(a, b)
        if short or not seeds or math.isnan(ratio):
            verdict = "not confirmed"
        elif lo >= RATIO_BAR:
            verdict = f"Confirmed (lower end >= {RATIO_BAR})"
        elif ratio >= RATIO_BAR:
            verdict = f"consistent (point >= {RATIO_BAR}, lower end below)"
        else:
            verdict = f"not met (point < {RATIO_BAR})"
        text = (f"{arm} ÷ {other} {where}: ratio of the arm means {_num(ratio)} [{_num(lo)}, "
                f"{_num(hi)}] (means {_num(ma)} / {_num(mb)}, paired bootstrap over seeds "
                f"{seeds})")  # fmt: skip
    else:
        d = [x - y for x, y in zip(a, b, strict=True)]
        mean = sum(d) / len(d) if d else math.nan
        lo, hi = bootstrap_ci(d)
        p = sign_flip_p(d)
        ok = not short and bool(d) and p <= P_BAR and mean > 0
        verdict = f"Confirmed (p <= {P_BAR}, positive)" if ok else "not confirmed"
        text = (f"{arm} − {other} {where}: {_num(mean, '+.3f')} [{_num(lo, '+.3f')}, "
                f"{_num(hi, '+.3f')}], exact sign-flip p {_num(p)} over seeds {seeds}")  # fmt: skip
    if short:
        verdict += f" (stopped before {window[1]:,} env steps: {'; '.join(short)})"
    if not short and len(seeds) < PLAN_SEEDS:  # the plan reads all its seeds: none before
        verdict = f"none yet ({len(seeds)} of the plan's {PLAN_SEEDS} seeds in)"
    return f"{text} -> verdict: {verdict}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    phases = ["record", "fit", "calibrate", "latency", "alarm", "separation", "distrl", "sampled",
              "endings", "report"]  # fmt: skip
    p.add_argument("phases", nargs="+", choices=phases)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "r2")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "r2",
                   help="recordings, fitted models and DistRL runs (default runs/r2)")  # fmt: skip
    p.add_argument("--scale", type=float, default=1.0,
                   help="record phase: episodes per behaviour times this (at least 1)")  # fmt: skip
    p.add_argument("--model", default=None,
                   help="the model directory the calibrate and alarm phases score "
                   "(default <runs>/model)")  # fmt: skip
    p.add_argument("--failure-cap", type=float, default=None,
                   help="fit phase: fit <runs>/model-cap<cap> (0.3: model-cap03)")  # fmt: skip
    p.add_argument("--data", default="train",
                   choices=["train", "train-noisy", "train-nearmiss", "train-big",
                            "train-big-astray"],
                   help="fit phase: the training recording (train-noisy: model-noisy, "
                   "train-nearmiss: model-nearmiss, train-big: model-big, "
                   "train-big-astray: model-big-astray)")  # fmt: skip
    p.add_argument("--done-gap", action="store_true",
                   help="fit phase: fit-reward --done-gap into <runs>/model-gap")  # fmt: skip
    p.add_argument("--done-on", default="episode", choices=["episode", "frame"],
                   help="fit phase: fit-reward --done-on (frame: <runs>/model-frame)")  # fmt: skip
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument("--seconds", type=float, default=5.0, help="one latency measurement")
    p.add_argument("--alarm-episodes", type=int, default=8, help="per policy (alarm phase)")
    p.add_argument("--separation-episodes", type=int, default=40,
                   help="per behaviour (separation phase)")  # fmt: skip
    p.add_argument("--behaviours", nargs="+", default=list(SEPARATION_BEHAVIOURS), metavar="NAME",
                   help="separation phase: the play_behaviours behaviours probed (default: "
                   f"{' '.join(SEPARATION_BEHAVIOURS)}; e.g. oscillate on_distractor)")  # fmt: skip
    p.add_argument(
        "--probe-seed",
        type=int,
        default=PROBE_SEED,
        help=f"separation phase: the first reset seed probed (default {PROBE_SEED})",
    )
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=3.0, help="a DistRL run's wall-clock cap")
    p.add_argument("--env-steps", type=int, default=None,
                   help="a DistRL run's env-step budget (run.max_env_steps)")  # fmt: skip
    p.add_argument("--eval-episodes", type=int, default=30)
    p.add_argument("--scene-offset", type=int, default=0, metavar="N",
                   help="distrl, sampled and endings phases: the held-out scenes are "
                   "held_out_seeds(--eval-episodes, N) (default 0; kept in the records)",
                   )  # fmt: skip
    p.add_argument("--window", type=int, nargs=2, action="append", metavar=("LO", "HI"),
                   help="report phase (repeatable): per run the held-out success averaged over "
                   "env steps [LO, HI], per arm and per pair the numbers and verdicts of "
                   "bench/plans/r2_confirm.md")  # fmt: skip
    p.add_argument("--set", dest="settings", nargs="+", default=[], metavar="KEY=VALUE",
                   help="distrl phase: overrides for every run of every arm, e.g. "
                   "distrl.barrier=true (kept in each record)")  # fmt: skip
    args = p.parse_args(argv)
    for lo, hi in args.window or []:
        if not 0 <= lo < hi:
            p.error(f"--window {lo} {hi}: needs 0 <= LO < HI")
    args.model = args.model or str(args.runs / "model")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"R2 on {machine_note()}", flush=True)
    for phase in args.phases:
        if phase == "record":
            record(args.out, args.runs, args.scale)
        elif phase == "fit":
            fit(args.out, args.runs, args.epochs, args.failure_cap, args.data, args.done_gap,
                args.done_on)  # fmt: skip
        elif phase == "calibrate":
            calibrate(args.out, args.model, args.runs)
        elif phase == "latency":
            latency(args.out, args.seconds, args.runs)
        elif phase == "alarm":
            alarm(args.out, args.alarm_episodes, args.model)
        elif phase == "separation":
            separation(args.out, args.separation_episodes, args.runs, tuple(args.behaviours),
                       args.probe_seed)  # fmt: skip
        elif phase == "distrl":
            distrl(
                args.out, args.seeds, args.minutes, args.eval_episodes, args.first_seed,
                args.arms, args.runs, args.env_steps, tuple(args.settings), args.scene_offset,
            )  # fmt: skip
        elif phase == "sampled":
            sampled(args.out, args.eval_episodes, args.scene_offset)
        elif phase == "endings":
            endings(args.out, args.eval_episodes, args.arms, args.runs, args.scene_offset)
        else:
            report(args.out, args.window)


if __name__ == "__main__":
    main()
