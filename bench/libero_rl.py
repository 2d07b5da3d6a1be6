"""RL on LIBERO-Object from the shipped progress model, the sparse flag and pixel change
(bench/plans/libero_rl.md, written before these runs).

One part per training seed (900, 901, 902), each playing the three reward arms one after another
in a rotated order. A run trains to 10k, 20k and 30k env steps taken in by the learner (three
legs: `evolve-envs train`, then `--resume` with the larger budget) and its last policy is
evaluated after each leg on the 20 held-out init states (30-49) with the mean action. The clone
every run starts from is made once (`evolve-envs clone`, seed 900) and measured on the same 20
scenes. Records: bench/results/libero_rl/runs/<arm>_s<seed>.json and clone.json; the run
directories (policies, videos) stay under runs/libero_rl/.

Usage::

    .venv/bin/python bench/libero_rl.py --part 1     # seed 900: learned, sparse, pixel
    .venv/bin/python bench/libero_rl.py --part 2     # seed 901: sparse, pixel, learned
    .venv/bin/python bench/libero_rl.py --part 3     # seed 902: pixel, learned, sparse
    .venv/bin/python bench/libero_rl.py --report     # the report, from the records alone
    .venv/bin/python bench/libero_rl.py --report --write   # also into its report.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import bootstrap_ci, sign_flip_p  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "bench" / "results" / "libero_rl"
RUNS = ROOT / "runs" / "libero_rl"
CONFIG = "libero_object_finetune"
ARMS = ("learned", "sparse", "pixel")
SEEDS = (900, 901, 902)


@dataclass(frozen=True)
class Plan:
    """One plan's runs: where its records go, its seeds, and what its arms override."""

    name: str
    seeds: tuple[int, ...]
    overrides: tuple[str, ...] = ()

    @property
    def records(self) -> Path:
        return ROOT / "bench" / "results" / self.name / "runs"

    @property
    def runs(self) -> Path:
        return RUNS if self.name == "libero_rl" else RUNS / self.name


PLANS = {
    # bench/plans/libero_rl.md
    "libero_rl": Plan("libero_rl", SEEDS),
    # bench/plans/libero_rl_finetune_block.md
    "finetune_block": Plan(
        "libero_rl_finetune_block",
        (910, 911, 912),
        ("distrl.lr=0.0003", "distrl.clip=0.2", "distrl.entropy_coef=0.0",
         "distrl.entropy_target=null"),
    ),
}  # fmt: skip
READ_POINTS = (10_000, 20_000, 30_000)
HELD_OUT = 20
CLONE_SEED = 900


def _cli(*argv: str) -> None:
    cmd = [str(ROOT / ".venv" / "bin" / "evolve-envs"), *argv]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def _arm_config(arm: str) -> str:
    """The config file of an arm: the shipped config, its reward block as the plan says."""
    from omegaconf import OmegaConf

    from evolve_envs.training.config import resolve_train_config

    base = OmegaConf.create(resolve_train_config(CONFIG).read_text())
    if arm == "sparse":
        base.reward_model = OmegaConf.create({"enable": False})
    elif arm == "pixel":
        base.reward_model.embedded_backend = "mock"
        base.reward_model.embedded_backend_kwargs = OmegaConf.create({"rule": "change"})
    out = RUNS / "configs" / f"{arm}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(OmegaConf.to_yaml(base))
    return str(out)


def _evaluate(policy: Path, out: Path) -> dict[str, object]:
    from evolve_envs.training.evaluation import evaluate_saved, read_saved

    result = evaluate_saved(read_saved(policy), out, episodes=HELD_OUT, sampled=False, videos=2)
    det = result["deterministic"]
    assert isinstance(det, dict)
    return {"success": det["success_rate"], "episodes": det["episodes"], "video": str(out)}


def clone() -> Path:
    """The clone every run starts from, and its held-out success (clone.json)."""
    path = RUNS / f"clone{CLONE_SEED}.safetensors"
    record = RECORDS / "clone.json"
    if not path.exists():
        _cli("clone", "--config", CONFIG, "--out", str(path), "--seed", str(CLONE_SEED))
    if not record.exists():
        from evolve_envs.training.policy_file import read_policy_info

        held = _evaluate(path, RUNS / "clone_eval")
        info = read_policy_info(path)["clone"]
        RECORDS.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"clone": info, "held_out": held}, indent=2) + "\n")
    return path


def run_arm(plan: Plan, arm: str, seed: int, start: Path) -> None:
    record = plan.records / f"{arm}_s{seed}.json"
    if record.exists():
        print(f"{record.name}: done already")
        return
    run_dir = plan.runs / f"{arm}_s{seed}"
    config = _arm_config(arm)
    reads: list[dict[str, object]] = []
    t0 = time.time()
    previous = 0
    for k, budget in enumerate(READ_POINTS):
        # a leg's run.max_env_steps counts from where it starts (a resumed run's own count)
        leg = budget - previous
        previous = budget
        common = [f"run.max_env_steps={leg}", "run.minutes=45", "eval.every_s=null"]
        if k == 0:
            _cli("train", "--config", config, "--run-dir", str(run_dir), "--overwrite",
                 "--no-progress-bar", f"run.seed={seed}", f"policy.init_from={start}",
                 *plan.overrides, *common)  # fmt: skip
        else:
            _cli("train", "--resume", str(run_dir), "--no-progress-bar", *common)
        summary = json.loads((run_dir / "summary.json").read_text())
        held = _evaluate(run_dir / "policy.safetensors", run_dir / f"eval_{budget}")
        reads.append(
            {
                "read_point": budget,
                "env_steps_in": summary["counters"]["env_steps_in"],
                "updates": summary["counters"]["updates"],
                "held_out": held,
                "train_last": summary.get("last"),
            }
        )
        print(f"{arm} s{seed} @ {budget}: held-out success {held['success']:.2f}", flush=True)
    record.parent.mkdir(parents=True, exist_ok=True)
    out = {"arm": arm, "seed": seed, "config": config, "wall_s": time.time() - t0, "reads": reads}
    record.write_text(json.dumps(out, indent=2, default=str) + "\n")


def part(plan: Plan, n: int) -> None:
    seed = plan.seeds[n - 1]
    order = ARMS[n - 1 :] + ARMS[: n - 1]
    start = clone()
    for arm in order:
        run_arm(plan, arm, seed, start)


def _num(value: object, digits: int = 2) -> str:
    if not isinstance(value, int | float) or value != value:
        return "-"
    return f"{value:.{digits}f}"


#: A read counts at a read point when it lies at most this many env steps past it: a leg ends
#: when the learner has taken in its budget, and the episodes in flight then still arrive.
READ_SLACK = 1_500


def _read_at(run: dict, point: int) -> dict | None:
    """The run's read at ``point`` env steps (the first at or past it, within
    :data:`READ_SLACK`), or None when it has none there."""
    for read in run["reads"]:
        if point <= int(read["env_steps_in"]) <= point + READ_SLACK:
            return read
    return None


def _final(run: dict) -> float:
    """Held-out success at the last read point (the primary metric); a run without a read
    there counts at its last read before it (the plan's rule)."""
    before = [r for r in run["reads"] if int(r["env_steps_in"]) <= READ_POINTS[-1] + READ_SLACK]
    read = _read_at(run, READ_POINTS[-1]) or (before[-1] if before else None)
    return float(read["held_out"]["success"]) if read else float("nan")


def _cell(read: dict | None, kind: str) -> str:
    if read is None:
        return "no read"
    if kind == "held":
        return f"{read['held_out']['success']:.2f}"
    last = read.get("train_last") or {}
    return (
        f"{_num(last.get('success'))} / {_num(last.get('model_progress'), 0)} / "
        f"{_num(last.get('alarm_firing'))}"
    )


def _rows(plan: Plan, runs: dict, kind: str, missing: str | None) -> list[str]:
    """One table row per arm and seed, a cell per read point; a run not there is ``missing``
    in every cell, or left out when ``missing`` is None."""
    rows = []
    for arm in ARMS:
        for seed in plan.seeds:
            r = runs.get((arm, seed))
            if r is None and missing is None:
                continue
            cells = [_cell(_read_at(r, p), kind) if r else missing for p in READ_POINTS]
            rows.append(f"| {arm} | {seed} | " + " | ".join(cells) + " |")
    return rows


def report(plan: Plan) -> str:
    clone_rec = json.loads((RECORDS / "clone.json").read_text())
    runs = {
        (r["arm"], r["seed"]): r
        for r in (json.loads(p.read_text()) for p in sorted(plan.records.glob("*.json")))
    }
    lines = [
        f"{plan.name}: LIBERO-Object task 0, policy on privileged state, rewards from the "
        "agentview camera;",
        f"held-out success over {HELD_OUT} init states (30-49), mean action.",
        f"cloned policy: {clone_rec['held_out']['success']:.2f}",
        "",
        "| arm | seed | 10k | 20k | 30k |",
        "|---|---|---|---|---|",
    ]
    lines += _rows(plan, runs, "held", missing="not run")
    lines += [
        "",
        "Training episodes at each read point (the last log interval): env success / the",
        "model's progress at the episode end (%) / hacking alarm firing (share of envs):",
        "",
        "| arm | seed | 10k | 20k | 30k |",
        "|---|---|---|---|---|",
    ]
    lines += _rows(plan, runs, "train", missing=None)
    paired = [
        _final(runs[("learned", s)]) - _final(runs[("sparse", s)])
        for s in plan.seeds
        if ("learned", s) in runs and ("sparse", s) in runs
    ]
    if paired:
        lo, hi = bootstrap_ci(paired)
        lines += [
            "",
            f"learned - sparse at 30k, paired by seed ({len(paired)} seeds): "
            f"mean {sum(paired) / len(paired):+.2f}, 95 % bootstrap [{lo:+.2f}, {hi:+.2f}], "
            f"sign-flip p {sign_flip_p(paired):.3f}",
        ]
    clone_success = float(clone_rec["held_out"]["success"])
    lines += ["", "Held-out success at 30k, mean over seeds, 95 % bootstrap interval:"]
    finals: dict[str, list[float]] = {}
    for arm in ARMS:
        finals[arm] = [_final(runs[(arm, s)]) for s in plan.seeds if (arm, s) in runs]
        if finals[arm]:
            lo, hi = bootstrap_ci(finals[arm])
            mean = sum(finals[arm]) / len(finals[arm])
            lines.append(
                f"  {arm}: {mean:.2f} [{lo:.2f}, {hi:.2f}] over {len(finals[arm])} seed(s)"
            )
    if len(paired) == len(plan.seeds):
        ties = all(d >= 0 for d in paired)
        above = all(v > clone_success for v in finals["learned"])
        verdict = (
            "the learned model pays at this budget"
            if ties and above
            else "the learned model does not pay at this budget (learned >= sparse in every "
            f"seed: {'met' if ties else 'not met'}; learned above the clone's "
            f"{clone_success:.2f} in every seed: {'met' if above else 'not met'})"
        )
        lines += ["", f"Verdict (the plan's rule): {verdict}."]
    else:
        pending = f"{len(paired)} of {len(plan.seeds)} seeds have both arms"
        lines += ["", f"Verdict: pending ({pending})."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", type=int, choices=(1, 2, 3))
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--plan", choices=sorted(PLANS), default="libero_rl")
    parser.add_argument("--write", action="store_true", help="also write <records>/report.md")
    args = parser.parse_args()
    plan = PLANS[args.plan]
    if args.part:
        part(plan, args.part)
    if args.report or not args.part:
        text = report(plan)
        print(text)
        if args.write:
            out = plan.records.parent / "report.md"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("```\n" + text + "\n```\n")
            print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
