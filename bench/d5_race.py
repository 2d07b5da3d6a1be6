"""D5 race: the cells of the algorithm × system 2×2 (``_d5_cells.CELLS``) on fresh seeds, run
interleaved, scored on env-step budgets and on minutes, with paired statistics.

* **Runs** — every cell trains from its named config (``reach_place_async`` /
  ``reach_place_sync``, ``--algo`` the cell's) on seeds ``--first-seed ..`` (race seeds: 100 on,
  never the tuning seed), until the learner has taken in ``--max-env-steps`` or ``--minutes`` have
  passed, whichever comes first; the run order rotates with the seed. ``--regime slow`` adds D3's
  slow reward model and mixed-speed workers (``_d3_runs.regime_overrides``).
* **Scoring** — every snapshot on ``--eval-episodes`` held-out scenes
  ``held_out_seeds(n, --scene-offset)`` (default 0; kept in each record as ``scene_offset``)
  (mean action); the last 3 snapshots also with sampled actions (a torch RNG seeded with the
  run's seed).
* **Report** (from the records alone, ``--report-only``) — per cell: success at the env-step
  budgets ``--at-steps`` and at the minutes ``--at-minutes``, AUC over env steps and over
  minutes, env steps and minutes to 30 % / 50 %, the mean of the last 3 snapshots (mean and
  sampled actions), each with a 95 % bootstrap interval over seeds; the paired differences
  (:data:`PAIRS`: the D3 question, the algorithm within each system, the system within each
  algorithm) with bootstrap intervals and exact sign-flip p-values (``_stats``); a plot
  ``d5_race.png`` of both curves.
* **Composition** (``--throughput DIR``, default ``bench/results/d5_throughput/<regime>`` when it
  holds records) — the wall clock predicted from the env-step curve and the cell's median
  throughput of stage 1 (``d5_throughput.py``): success at ``--at-minutes`` read at
  ``rate × minutes`` env steps, minutes to 30 % / 50 % as env steps to it ÷ rate; per cell beside
  the direct numbers, and the check: direct − composed per cell and over every run, with its
  interval; and :data:`PAIRS` on the composed minutes to 30 % / 50 % (first − second, and
  second ÷ first: how many times sooner). A run composes only with stage 1's runs of its own
  block (``block`` in both records): a block trained differently collects at another pace.
  Where the two agree, runs scored on env steps alone (several may share a machine) give
  wall-clock curves through the throughput of an idle machine.
* **Crossed** (``--window LO HI``, bench/plans/d5_crossed.md) — per run the held-out success
  averaged over env steps [LO, HI]; per block barrier − no barrier (:data:`CROSSED`), the
  block's effect within each system (:data:`BLOCK_EFFECT`) and the interaction, paired by seed,
  with intervals, sign-flip p and the plan's verdicts. ``--alone DIR`` (the ``--out`` of the
  runs alone): alone − shared window mean and env steps to 30 % per run alone, and the plan's
  rule on composed minutes (:data:`SHARING_LIMIT`).

    python bench/d5_race.py --seeds 2 --first-seed 100    # one part: 2 seeds x 4 cells
    python bench/d5_race.py --seeds 2 --first-seed 102    # the next part
    python bench/d5_race.py --report-only

Records: ``<out>/runs/<cell>-s<seed>.json`` (``_d3_runs.run_and_evaluate``'s record plus the
cell, the regime, the last-3 sampled successes); a run already recorded is skipped.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, machine_note, md_table
from _d3_runs import load_range, read_records, regime_overrides, run_and_evaluate, write_json
from _d5_cells import (
    CELLS,
    D5_CELLS,
    LABELS,
    area,
    cell_config,
    cell_overrides,
    first_reach,
    last_k_mean,
    step_at,
)
from _stats import bootstrap_ci, sign_flip_p

#: Paired comparisons (first minus second, seed by seed).
PAIRS = [
    ("distrl_async", "grpo_sync"),  # D3's question: each algorithm on its own system
    ("distrl_async", "grpo_async"),  # the algorithm, asynchronous system
    ("distrl_sync", "grpo_sync"),  # the algorithm, synchronous system
    ("distrl_async", "distrl_sync"),  # the system, DistRL
    ("grpo_async", "grpo_sync"),  # the system, GRPO
]


def sampled_last(
    run_dir: Path, episodes: int, seed: int, k: int = 3, offset: int = 0
) -> list[float]:
    """Held-out success of the last ``k`` snapshots with sampled actions (RNG seed ``seed``), on
    the held-out scenes ``held_out_seeds(episodes, offset)``."""
    from d3_learning_curves import snapshots

    from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds, read_saved

    snaps = snapshots(run_dir)[-k:]
    if not snaps:
        return []
    out = []
    with HeldOutEvaluator(read_saved(snaps[0]).cfg) as evaluator:
        for path in snaps:
            policy = evaluator.policy(read_saved(path).payload["policy"])
            res = evaluator.run(policy, held_out_seeds(episodes, offset), deterministic=False,
                                sample_seed=seed)  # fmt: skip
            out.append(res.success_rate)
    return out


def run_metrics(
    rec: dict[str, Any], at_steps: list[int], at_minutes: list[float]
) -> dict[str, float]:
    """The numbers of one run (see the module docstring).

    >>> rec = {"curve": [{"env_steps": 1e3, "time_s": 60.0, "success": 0.2},
    ...                  {"env_steps": 2e3, "time_s": 120.0, "success": 0.6}],
    ...        "sampled_last": [0.1, 0.5]}
    >>> m = run_metrics(rec, [2000], [1.0])
    >>> m["steps 2000"], m["min 1"], m["steps to 50 %"], m["last 3 (sampled)"]
    (0.6, 0.2, 2000.0, 0.3)
    """
    c = rec["curve"]
    out: dict[str, float] = {}
    for s in at_steps:
        out[f"steps {s}"] = step_at(c, "env_steps", s)
    for m in at_minutes:
        out[f"min {m:g}"] = step_at(c, "time_s", m * 60)
    out["AUC (env steps)"] = area(c, "env_steps", max(at_steps))
    out["AUC (minutes)"] = area(c, "time_s", max(at_minutes) * 60)
    for level in (0.3, 0.5):
        out[f"steps to {level:.0%}".replace("%", " %")] = first_reach(c, "env_steps", level)
        out[f"min to {level:.0%}".replace("%", " %")] = first_reach(c, "time_s", level) / 60
    out["last 3 (mean action)"] = last_k_mean(c, 3)
    sampled = rec.get("sampled_last", [])
    out["last 3 (sampled)"] = float(np.mean(sampled)) if sampled else math.nan
    return out


def composed_metrics(rec: dict[str, Any], rate: float, at_minutes: list[float]) -> dict[str, float]:
    """One run's wall-clock numbers predicted from its env-step curve and a throughput
    ``rate`` (env steps per second).

    >>> rec = {"curve": [{"env_steps": 1e3, "time_s": 90.0, "success": 0.2},
    ...                  {"env_steps": 2e3, "time_s": 200.0, "success": 0.6}]}
    >>> m = composed_metrics(rec, 20.0, [0.5, 1.0])
    >>> m["min 0.5"], m["min 1"], m["min to 50 %"], m["min at end"]
    (0.0, 0.2, 1.6666666666666667, 1.6666666666666667)
    """
    c = rec["curve"]
    out = {f"min {m:g}": step_at(c, "env_steps", rate * 60 * m) for m in at_minutes}
    for level in (0.3, 0.5):
        out[f"min to {level:.0%}".replace("%", " %")] = (
            first_reach(c, "env_steps", level) / rate / 60
        )
    out["min at end"] = c[-1]["env_steps"] / rate / 60 if c else math.nan
    return out


def block_key(rec: dict[str, Any]) -> str:
    """A run's cell and the block it trained (``block``), as one string; a record that does
    not say its block has ``"?"``, which matches nothing another record can say."""
    return f"{rec['cell']} {json.dumps(rec.get('block', '?'), sort_keys=True)}"


def stage1_rates(folder: Path, regime: str) -> dict[str, float]:
    """Median env steps per second of stage 1's records of ``regime`` in ``folder``, per cell
    and block (:func:`block_key`): a race run composes only with the throughput of its block.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for i, (lr, rate) in enumerate([(1e-3, 300.0), (1e-3, 340.0), (3e-3, 200.0)]):
    ...     _ = (d / f"r{i}.json").write_text(json.dumps({"cell": "grpo_sync",
    ...         "regime": "instant", "block": {"lr": lr}, "env_steps_per_s": rate}))
    >>> sorted(stage1_rates(d, "instant").values())
    [200.0, 320.0]
    """
    rates: dict[str, list[float]] = {}
    for r in read_records(folder):
        if r.get("regime") == regime:
            rates.setdefault(block_key(r), []).append(float(r["env_steps_per_s"]))
    return {key: float(np.median(v)) for key, v in rates.items()}


def composition(
    records: list[dict[str, Any]],
    metrics: dict[tuple[str, int], dict[str, float]],
    rates: dict[str, float],
    at_minutes: list[float],
) -> list[str]:
    """Report lines: per cell the composed numbers beside the direct ones, and the check per
    cell and over every run. A run whose block stage 1 did not run is left out, and counted."""
    names = [*(f"min {m:g}" for m in at_minutes), "min to 30 %", "min to 50 %"]
    rows, gaps = [], {c: {n: [] for n in names} for c in [*CELLS, "every run"]}
    unmatched: dict[str, int] = {}
    composed: list[str] = []  # the cells with a composed run
    by_run: dict[tuple[str, int], dict[str, float]] = {}  # composed numbers per (cell, seed)
    for cell in CELLS:
        runs = sorted((r for r in records if r["cell"] == cell), key=lambda r: r["seed"])
        rate_of = {r["seed"]: rates.get(block_key(r)) for r in runs}
        mine = [r for r in runs if rate_of[r["seed"]] is not None]
        unmatched[cell] = len(runs) - len(mine)
        if not mine:
            continue
        comp = [composed_metrics(r, rate_of[r["seed"]], at_minutes) for r in mine]
        by_run.update({(cell, r["seed"]): m for r, m in zip(mine, comp, strict=True)})
        direct = [metrics[cell, r["seed"]] for r in mine]
        for n in names:
            d = [a[n] - b[n] for a, b in zip(direct, comp, strict=True)
                 if np.isfinite(a[n]) and np.isfinite(b[n])]  # fmt: skip
            gaps[cell][n] += d
            gaps["every run"][n] += d
        rate = "/".join(sorted({f"{rate_of[r['seed']]:.0f}" for r in mine}))
        composed.append(cell)
        rows.append([f"{LABELS[cell]} (n={len(mine)}, {rate} env steps/s)",
                     *(f"{_ci([d[n] for d in direct], 0)} / {_ci([c[n] for c in comp], 0)}"
                       for n in names)])  # fmt: skip
    for who in [*composed, "every run"]:
        check = []
        for n in names:
            if gaps[who][n]:
                lo, hi = map(_tidy, bootstrap_ci(gaps[who][n], seed=2))
                check.append(f"{_tidy(np.mean(gaps[who][n])):+.3g} [{lo:+.3g}, {hi:+.3g}] "
                             f"(n={len(gaps[who][n])})")  # fmt: skip
            else:
                check.append("-")
        rows.append([f"direct − composed, {LABELS.get(who, who)}", *check])
    title = (
        "Wall clock: direct / composed from the env-step curve and stage 1's median "
        "throughput of the same block (mean over seeds [95 % bootstrap interval])"
    )
    lines = [title, "", md_table(["cell", *names], rows), ""]
    reach = ["min to 30 %", "min to 50 %"]
    head = [*(f"{n}: first − second" for n in reach), *(f"{n}: second ÷ first" for n in reach),
            *(f"{n}: second ÷ first, never = its end" for n in reach)]  # fmt: skip
    diff, ratio = paired_rows(by_run, reach), paired_rows(by_run, reach, ratio=True)
    bound = paired_rows(by_run, reach, ratio=True, end="min at end")
    prow = [[*d, *r[1:], *b[1:]] for d, r, b in zip(diff, ratio, bound, strict=True)]
    lines += ["Paired on the composed wall clock (an idle machine's minutes): mean [95 % "
              "bootstrap interval], sign-flip p; second ÷ first is how many times sooner the "
              "first got there. *never = its end*: where one run of a pair never got there, it "
              "counts as getting there when it ended, so the ratio is a bound: the true one is "
              "larger where the second run never got there, smaller where the first never did.",
              "", md_table(["pair", *head], prow), ""]  # fmt: skip
    left = [f"{LABELS[c]}: {k}" for c, k in unmatched.items() if k]
    if left:
        lines += ["Runs left out of the composition, stage 1 having no run of their block "
                  f"(the block is in each record): {'; '.join(left)}.", ""]  # fmt: skip
    return lines


def sharing_note(records: list[dict[str, Any]]) -> list[str]:
    """How many race runs shared the machine (``runs_at_once``; older records ran alone).

    >>> sharing_note([{"runs_at_once": 2}, {"runs_at_once": 2}, {}])[0].split(".")[0]
    'Race runs on the machine at once: 1 (1 run), 2 (2 runs)'
    """
    counts = Counter(int(r.get("runs_at_once", 1)) for r in records)
    if set(counts) == {1}:
        return ["One race run at a time on the machine.", ""]
    text = ", ".join(f"{k} ({n} run{'s' * (n > 1)})" for k, n in sorted(counts.items()))
    return [f"Race runs on the machine at once: {text}. The direct wall clock of a run that "
            "shared it is that machine's; the composed one is an idle machine's.", ""]  # fmt: skip


def _why(values: list[float]) -> str:
    """Why values are missing: inf, the run never got there; NaN, it ended first."""
    never = sum(1 for v in values if v == math.inf)
    short = sum(1 for v in values if math.isnan(v))
    return ", ".join([f"{never} never"] * bool(never) + [f"{short} ended before"] * bool(short))


def _missing(values: list[float]) -> str:
    """:func:`_why` in brackets after a number, or nothing when no value is missing."""
    why = _why(values)
    return f" ({why})" if why else ""


def _ci(values: list[float], seed: int) -> str:
    """Mean and bootstrap interval over the seeds that have a number, and why the rest have none.

    >>> _ci([0.5, math.inf, math.nan], 0)
    '0.5 [0.5, 0.5] (1 never, 1 ended before)'
    """
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        never = sum(1 for v in values if v == math.inf)
        return f"never ({never}/{len(values)})" if never == len(values) else f"-{_missing(values)}"
    lo, hi = bootstrap_ci(finite, seed=seed)
    return f"{np.mean(finite):.3g} [{lo:.3g}, {hi:.3g}]{_missing(values)}"


def _tidy(x: float) -> float:
    """``x`` without float residue, so a mean of differences that cancel prints as 0.

    >>> _tidy(0.1 + 0.2 - 0.3), _tidy(-1e-18)
    (0.0, 0.0)
    """
    return round(float(x), 9) + 0.0  # + 0.0 turns -0.0 into 0.0


def _paired_cell(pairs: list[tuple[float, float]], ratio: bool) -> str:
    """One pair's numbers over the seeds: mean [interval] p of first − second, or with
    ``ratio`` the mean of second ÷ first; a seed where either has no number is left out, said.

    >>> _paired_cell([(10.0, 20.0), (10.0, 30.0), (5.0, math.inf)], ratio=True)
    '2.5 [2, 3] p=0.5 (1 seed left out; runs without a number: 1 never)'
    """
    d = [(y / x if ratio else x - y) for x, y in pairs if np.isfinite(x) and np.isfinite(y)]
    # a seed where either cell has no number has no difference to average: say so
    gone = [v for x, y in pairs if not (np.isfinite(x) and np.isfinite(y)) for v in (x, y)]
    k = len(gone) // 2
    note = f" ({k} seed{'s' * (k > 1)} left out; runs without a number: {_why(gone)})" if k else ""
    if not d:
        return f"-{note}"
    mean, (lo, hi) = _tidy(np.mean(d)), map(_tidy, bootstrap_ci(d, seed=1))
    # the test on a ratio is the test on its log: second slower in every seed, or not
    p = sign_flip_p(np.log(d) if ratio else d)
    sign = "" if ratio else "+"
    return f"{mean:{sign}.3g} [{lo:{sign}.3g}, {hi:{sign}.3g}] p={p:.3g}{note}"


def _at_end(x: float, y: float, x_end: float, y_end: float) -> tuple[float, float]:
    """A pair where one run never got there: that run counted at its end, which bounds how
    much sooner the other was; a pair where both never did stays as it is (no bound).

    >>> _at_end(12.0, math.inf, 30.0, 28.0), _at_end(math.inf, math.inf, 30.0, 28.0)
    ((12.0, 28.0), (inf, inf))
    """
    if math.isinf(x) == math.isinf(y):
        return x, y
    return (x_end if math.isinf(x) else x), (y_end if math.isinf(y) else y)


def paired_rows(
    metrics: dict[tuple[str, int], dict[str, float]],
    names: list[str],
    ratio: bool = False,
    end: str | None = None,
) -> list[list[str]]:
    """Rows of :data:`PAIRS` over the seeds both cells ran (see :func:`_paired_cell`); with
    ``end`` (the metric that holds a run's end), a run that never got there is counted at its
    end when the other run did (:func:`_at_end`), and the cell says how many were."""
    rows = []
    for a, b in PAIRS:
        shared = sorted({s for c, s in metrics if c == a} & {s for c, s in metrics if c == b})
        if not shared:
            continue
        row = [f"{LABELS[a]} − {LABELS[b]} (n={len(shared)})"]
        for n in names:
            pairs = [(metrics[a, s][n], metrics[b, s][n]) for s in shared]
            if end is None:
                row.append(_paired_cell(pairs, ratio))
                continue
            ends = [(metrics[a, s][end], metrics[b, s][end]) for s in shared]
            bounded = [_at_end(x, y, *e) for (x, y), e in zip(pairs, ends, strict=True)]
            k = sum(1 for x, y in pairs if math.isinf(x) != math.isinf(y))
            row.append(_paired_cell(bounded, ratio) + f" ({k} at its run's end)" * bool(k))
        rows.append(row)
    return rows


#: bench/plans/d5_crossed.md: per block, (barrier cell, no-barrier cell)
CROSSED = {
    "async block": ("distrl_async_barrier", "distrl_async"),
    "sync block": ("distrl_sync", "distrl_sync_free"),
}
#: the block's effect within each system: (sync block cell, async block cell)
BLOCK_EFFECT = {
    "barrier": ("distrl_sync", "distrl_async_barrier"),
    "no barrier": ("distrl_sync_free", "distrl_async"),
}
#: alone − shared window difference above which composed minutes are not supported
SHARING_LIMIT = 0.15


def window_mean(curve: list[dict[str, float]], lo: float, hi: float) -> float:
    """Held-out success averaged over env steps ``[lo, hi]`` (step interpolation,
    :func:`_d5_cells.area`); NaN for a run that stopped before ``hi``.

    >>> c = [{"env_steps": 10.0, "success": 0.2}, {"env_steps": 30.0, "success": 0.6},
    ...      {"env_steps": 40.0, "success": 1.0}]
    >>> window_mean(c, 20, 40), window_mean(c, 20, 50)
    (0.4, nan)
    """
    if not curve or curve[-1]["env_steps"] < hi or hi <= lo:
        return math.nan
    below = area(curve, "env_steps", lo) * lo if lo > 0 else 0.0
    return float((area(curve, "env_steps", hi) * hi - below) / (hi - lo))


def _pair_stats(d: list[float]) -> tuple[str, float, float]:
    """``mean [interval] p=`` of paired differences, with the mean and p."""
    mean, (lo, hi) = _tidy(np.mean(d)), map(_tidy, bootstrap_ci(d, seed=1))
    p = sign_flip_p(d)
    return f"{mean:+.3g} [{lo:+.3g}, {hi:+.3g}] p={p:.3g}", mean, p


def crossed(
    records: list[dict[str, Any]], lo: int, hi: int, intake: dict[str, float] | None = None
) -> list[str]:
    """Report lines of bench/plans/d5_crossed.md: the window mean per run, the barrier's effect
    per block (barrier − no barrier, paired by seed), the block's effect within each system and
    the interaction, each with a bootstrap interval and an exact sign-flip p; runs that stopped
    before ``hi`` are listed with their env steps and their pairs left out and counted."""
    val = {(r["cell"], r["seed"]): window_mean(r["curve"], lo, hi) for r in records}
    ends = {(r["cell"], r["seed"]): (r["curve"][-1]["env_steps"] if r["curve"] else 0.0)
            for r in records}  # fmt: skip
    lines = [f"Crossed pairs (bench/plans/d5_crossed.md): held-out success averaged over env "
             f"steps [{lo}, {hi}] (step interpolation), first − second paired by seed: mean "
             "[95 % bootstrap interval], exact sign-flip p. *shown*: p ≤ 0.05.", ""]  # fmt: skip
    rows = []
    for cell in CELLS:
        seeds = sorted(s for c, s in val if c == cell)
        if seeds:
            got = [f"{s}: {val[cell, s]:.3g}" if np.isfinite(val[cell, s]) else f"{s}: -"
                   for s in seeds]  # fmt: skip
            rows.append([f"{LABELS[cell]} ({cell})", ", ".join(got)])
    lines += [md_table(["cell", "window mean per seed"], rows), ""]
    stopped = [f"{c} seed {s} ({ends[c, s]:.0f} env steps)" for (c, s), v in sorted(val.items())
               if not np.isfinite(v)]  # fmt: skip
    if stopped:
        lines += [f"Runs that stopped before {hi} env steps (no window value): "
                  f"{'; '.join(stopped)}.", ""]  # fmt: skip

    def diffs(a: str, b: str) -> tuple[list[int], dict[int, float], int]:
        seeds = sorted({s for c, s in val if c == a} & {s for c, s in val if c == b})
        d = {s: val[a, s] - val[b, s] for s in seeds
             if np.isfinite(val[a, s]) and np.isfinite(val[b, s])}  # fmt: skip
        return seeds, d, len(seeds) - len(d)

    rows, effect = [], {}
    for block, (a, b) in CROSSED.items():
        seeds, d, left = diffs(a, b)
        if not d:
            rows.append([f"barrier, {block}: {a} − {b}", "-", "-", str(left)])
            continue
        text, mean, p = _pair_stats(list(d.values()))
        effect[block] = (d, mean, p)
        rows.append([f"barrier, {block}: {a} − {b}", f"{text} (n={len(d)})",
                     "shown" if p <= 0.05 else "not shown", str(left)])  # fmt: skip
    for system, (a, b) in BLOCK_EFFECT.items():
        seeds, d, left = diffs(a, b)
        text, _, p = _pair_stats(list(d.values())) if d else ("-", 0.0, math.nan)
        rows.append([f"block (sync − async), {system}: {a} − {b}", f"{text} (n={len(d)})",
                     ("shown" if p <= 0.05 else "not shown") if d else "-", str(left)])  # fmt: skip
    if len(effect) == 2:
        (da, _, _), (ds, _, _) = effect["async block"], effect["sync block"]
        both = sorted(set(da) & set(ds))
        inter = [ds[s] - da[s] for s in both]
        left = len(set(da) | set(ds)) - len(both)
        if inter:
            text, _, p = _pair_stats(inter)
            rows.append(["interaction: barrier in sync block − barrier in async block",
                         f"{text} (n={len(inter)})", "shown" if p <= 0.05 else "not shown",
                         str(left)])  # fmt: skip
    lines += [md_table(["pair", "difference", "verdict", "pairs left out"], rows), ""]
    shown = [(m, p) for _, m, p in effect.values()]
    general = len(shown) == 2 and all(p <= 0.05 for _, p in shown) and (
        np.sign(shown[0][0]) == np.sign(shown[1][0]) != 0)  # fmt: skip
    lines += [f"The barrier's effect on the window mean is "
              f"{'shown in general' if general else 'not shown in general'} (shown in both "
              "blocks with the same sign).", ""]  # fmt: skip
    if intake:
        lines += crossed_minutes(records, val, intake, hi)
    return lines


def intake_rates(folder: Path, regime: str) -> dict[str, float]:
    """Median learner intake per second (``intake_env_steps_per_s``, ``d5_throughput.py
    --intake-from-min``) per cell of the throughput records of ``regime`` in ``folder``."""
    got: dict[str, list[float]] = {}
    for r in read_records(folder) if folder.is_dir() else []:
        if r.get("regime") == regime and "intake_env_steps_per_s" in r:
            got.setdefault(r["cell"], []).append(float(r["intake_env_steps_per_s"]))
    return {c: float(np.median(v)) for c, v in got.items()}


def crossed_minutes(
    records: list[dict[str, Any]],
    val: dict[tuple[str, int], float],
    intake: dict[str, float],
    hi: int,
) -> list[str]:
    """Minutes to 30 % per run (env steps to 30 % ÷ the cell's learner intake alone), paired as
    :func:`crossed`, as ratios (barrier ÷ no barrier; sync block ÷ async block). A run that never
    got there counts at ``hi`` (the ratio is then a bound); a pair where neither did, or where a
    run stopped before ``hi``, is left out and counted."""
    reach = {(r["cell"], r["seed"]): first_reach(r["curve"], "env_steps", 0.3) for r in records}
    never = Counter(c for (c, s), v in reach.items() if math.isinf(v) and np.isfinite(val[c, s]))
    lines = ["Minutes to 30 % (env steps to 30 % ÷ the cell's learner intake alone, "
             f"{', '.join(f'{c} {v:.1f}/s' for c, v in intake.items())}): ratio first ÷ second "
             f"paired by seed, mean [95 % bootstrap interval], sign-flip p on its log; a run "
             f"that never got there counts at {hi} env steps and the ratio is a bound.", "",
             "Runs that never reached 30 %: " + (", ".join(f"{c} {n}" for c, n in
             sorted(never.items())) or "none") + ".", ""]  # fmt: skip
    rows = []
    named = [*(("barrier, " + k, v) for k, v in CROSSED.items()),
             *(("block (sync ÷ async), " + k, v) for k, v in BLOCK_EFFECT.items())]  # fmt: skip
    for what, (a, b) in named:
        if a not in intake or b not in intake:
            rows.append([f"{what}: {a} ÷ {b}", "- (no intake rate)", "-"])
            continue
        seeds = sorted({s for c, s in reach if c == a} & {s for c, s in reach if c == b})
        pairs, left, bounds = [], 0, set()
        for s in seeds:
            x, y = reach[a, s], reach[b, s]
            if not (np.isfinite(val[a, s]) and np.isfinite(val[b, s])) or (
                    math.isinf(x) and math.isinf(y)):  # fmt: skip
                left += 1
                continue
            if math.isinf(x) != math.isinf(y):  # the run that never got there counts at hi
                bounds.add("at least" if math.isinf(x) else "at most")
            pairs.append((min(y, hi) / intake[b] / 60, min(x, hi) / intake[a] / 60))
        cell = _paired_cell(pairs, ratio=True) if pairs else "-"
        if bounds:
            cell += f" (a bound: {' / '.join(sorted(bounds))})"
        rows.append([f"{what}: {a} ÷ {b}", cell, str(left)])
    return lines + [md_table(["pair", "minutes to 30 %: ratio", "pairs left out"], rows), ""]


def alone_table(
    shared: list[dict[str, Any]], alone: list[dict[str, Any]], lo: int, hi: int
) -> list[str]:
    """Report lines: per cell and seed run alone, the window mean and env steps to 30 % alone
    minus shared, as values; composed minutes are not supported if any window difference
    exceeds :data:`SHARING_LIMIT`."""
    by = {(r["cell"], r["seed"]): r for r in shared}
    rows, worst = [], []
    for r in sorted(alone, key=lambda r: (list(CELLS).index(r["cell"]), r["seed"])):
        key = (r["cell"], r["seed"])
        if key not in by:
            rows.append([f"{r['cell']} seed {r['seed']}", "no shared run", "-"])
            continue
        s = by[key]
        w = window_mean(r["curve"], lo, hi) - window_mean(s["curve"], lo, hi)
        a30, s30 = (first_reach(x["curve"], "env_steps", 0.3) for x in (r, s))
        if np.isfinite(w):
            worst.append(w)
        steps = f"{a30 - s30:+.0f}" if np.isfinite(a30) and np.isfinite(s30) else (
            f"alone {a30:.0f}, shared {s30:.0f}".replace("inf", "never"))  # fmt: skip
        rows.append([f"{r['cell']} seed {r['seed']}", f"{_tidy(w):+.3g}" if np.isfinite(w)
                     else "- (a run stopped before the window's end)", steps])  # fmt: skip
    lines = [f"Alone − shared, per run alone (values, no test): window mean over env steps "
             f"[{lo}, {hi}] and env steps to 30 %", "",
             md_table(["run", "window mean: alone − shared", "env steps to 30 %: alone − shared"],
                      rows), ""]  # fmt: skip
    over = [w for w in worst if w > SHARING_LIMIT]
    verdict = (f"composed minutes are not supported ({len(over)} alone − shared window "
               f"difference(s) above {SHARING_LIMIT})" if over else
               f"no alone − shared window difference exceeds {SHARING_LIMIT}")  # fmt: skip
    return lines + [f"Sharing: {verdict}.", ""]


def report(
    out: Path,
    at_steps: list[int],
    at_minutes: list[float],
    throughput: Path | None = None,
    window: list[int] | None = None,
    alone: Path | None = None,
) -> str:
    """Tables and plot from the records alone (and stage 1's, for the composition)."""
    records = read_records(out / "runs")
    if not records:
        raise SystemExit(f"no records in {out / 'runs'}")
    regime = records[0]["regime"]
    metrics = {(r["cell"], r["seed"]): run_metrics(r, at_steps, at_minutes) for r in records}
    names = list(next(iter(metrics.values())))
    cells = [c for c in CELLS if any(r["cell"] == c for r in records)]
    lines = [f"D5 race on ReachPlace, regime {regime}, {machine_note(load_range(records))}", "",
             "Per cell: mean over seeds [95 % bootstrap interval]. A seed without a number:",
             "*never*, the run never reached that success; *ended before*, the run ended (its",
             "env-step budget or its minutes) before that point.", ""]  # fmt: skip
    lines += sharing_note(records)
    rows = []
    for cell in cells:
        seeds = sorted(s for c, s in metrics if c == cell)
        cis = [_ci([metrics[cell, s][n] for s in seeds], i) for i, n in enumerate(names)]
        rows.append([f"{LABELS[cell]} (n={len(seeds)})", *cis])
    lines += [md_table(["cell", *names], rows), ""]
    lines += ["Paired differences (first − second, per seed): mean [95 % bootstrap interval], "
              "sign-flip p (exact, two-sided)", ""]  # fmt: skip
    lines += [md_table(["pair", *names], paired_rows(metrics, names)), ""]
    folder = throughput or ROOT / "bench" / "results" / "d5_throughput" / regime
    rates = stage1_rates(folder, regime) if folder.is_dir() else {}
    if rates:
        lines += composition(records, metrics, rates, at_minutes)
    if window is not None:
        lines += crossed(records, *window, intake_rates(folder, regime))
    if alone is not None:
        lo_hi = window or [0, max(at_steps)]
        lines += alone_table(records, read_records(alone / "runs") or read_records(alone), *lo_hi)
    text = "\n".join(lines) + "\n"
    (out / "d5_race_summary.md").write_text(text)
    plot(out, records, cells)
    print(text)
    return text


def plot(out: Path, records: list[dict[str, Any]], cells: list[str]) -> None:
    """Mean held-out success per cell against env steps and against minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, scale, label in ((axes[0], "env_steps", 1e3, "env steps (k)"),
                                  (axes[1], "time_s", 60.0, "minutes")):  # fmt: skip
        for cell in cells:
            curves = [r["curve"] for r in records if r["cell"] == cell and r["curve"]]
            if not curves:
                continue
            top = min(c[-1][key] for c in curves)
            grid = np.linspace(0, top, 50)
            ys = np.array([[step_at(c, key, x) for x in grid] for c in curves])
            ax.plot(grid / scale, np.nanmean(ys, axis=0), label=f"{LABELS[cell]} (n={len(curves)})")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out success (mean action)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "d5_race.png", dpi=100)
    plt.close(fig)


def run_part(args: argparse.Namespace) -> None:
    import ray
    from _d3_runs import ray_init

    extra = [*regime_overrides(args.regime, latency_ms=args.latency_ms, step_ms=args.step_ms),
             *args.overrides] if args.regime != "instant" else list(args.overrides)  # fmt: skip
    ray_init(2)  # as D3's race
    try:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            k = seed % len(args.cells)
            for cell in args.cells[k:] + args.cells[:k]:  # interleaved, rotating with the seed
                path = args.out / "runs" / f"{cell}-s{seed}.json"
                if path.exists():
                    print(f"{cell} seed {seed}: recorded already", flush=True)
                    continue
                overrides = [*cell_overrides(cell), *extra,
                             f"run.max_env_steps={args.max_env_steps}"]  # fmt: skip
                run_dir = args.runs / f"{cell}-s{seed}"
                rec = run_and_evaluate(
                    config=cell_config(cell), algo=CELLS[cell][0], seed=seed,
                    minutes=args.minutes, run_dir=run_dir,
                    snapshot_every_s=args.snapshot_every_s, eval_episodes=args.eval_episodes,
                    scene_offset=args.scene_offset, overrides=overrides, sampled=False,
                )  # fmt: skip
                sampled = sampled_last(run_dir, args.eval_episodes, seed, offset=args.scene_offset)
                rec.update(cell=cell, regime=args.regime, max_env_steps=args.max_env_steps,
                           sampled_last=sampled, runs_at_once=args.runs_at_once,
                           scene_offset=args.scene_offset)  # fmt: skip
                write_json(path, rec)
                print(f"{cell} seed {seed}: {rec['curve'][-1] if rec['curve'] else 'no curve'}",
                      flush=True)  # fmt: skip
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=list(D5_CELLS), choices=list(CELLS))
    ap.add_argument("--seeds", type=int, default=2, help="seeds per cell in this part")
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--max-env-steps", type=int, default=200_000)
    ap.add_argument("--minutes", type=float, default=15.0, help="wall-clock cap per run")
    ap.add_argument("--at-steps", type=int, nargs="+", default=[50_000, 100_000, 200_000])
    ap.add_argument("--at-minutes", type=float, nargs="+", default=[5.0, 10.0, 15.0])
    ap.add_argument("--regime", choices=["instant", "slow"], default="instant")
    ap.add_argument("--latency-ms", type=float, default=500.0)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--runs-at-once", type=int, default=1,
                    help="race runs on the machine at once, this one included")  # fmt: skip
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--scene-offset", type=int, default=0,
                    help="held-out scenes held_out_seeds(eval_episodes, N)")  # fmt: skip
    ap.add_argument("--snapshot-every-s", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/d5_race_<regime>")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "d5_race")
    ap.add_argument("--report-only", action="store_true", help="re-render from records only")
    ap.add_argument("--throughput", type=Path, default=None,
                    help="stage 1's records for the composition "
                    "(default bench/results/d5_throughput/<regime>)")  # fmt: skip
    ap.add_argument("--window", type=int, nargs=2, metavar=("LO", "HI"), default=None,
                    help="report the window mean over env steps [LO, HI] and the crossed "
                    "pairs of bench/plans/d5_crossed.md")  # fmt: skip
    ap.add_argument("--alone", type=Path, default=None,
                    help="the --out of the runs alone: the alone − shared table")  # fmt: skip
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = ap.parse_args(argv)
    args.out = args.out or ROOT / "bench" / "results" / f"d5_race_{args.regime}"
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_part(args)
    report(args.out, args.at_steps, args.at_minutes, args.throughput, args.window, args.alone)


if __name__ == "__main__":
    main()
