"""L1: a LIBERO progress model fitted here, judged against LIBERO's own success flag.

Three steps, each a command of the package, then one table:

1. ``evolve-envs demos`` records the scripted expert and its five failure rules on LIBERO-Object
   (``--record``: the training set on init states 0-7 for the expert, 0 for the rules; the
   held-out set on init states 40-42 and 40, which the fit never sees);
2. ``evolve-envs fit-reward`` fits the progress model (one frame and the task text) on the
   training set (``--fit``);
3. ``evolve-envs calibrate`` scores the held-out set with the fitted model and with the mock's
   pixel-change rule, against the env's success flag.

Held out two ways: by init state (the model fitted on every task's training episodes, judged on
init states it never saw), and by whole task (``--held-out-tasks``: a second model fitted without
those tasks, judged on their held-out episodes; reported, with no bar).

The table: VOC, and done precision and recall judged two ways: by the model's own ``/done``
(its fitted threshold) and by calibrate's progress threshold (an episode's highest progress at or
over 95 %); for each, the rule-made failures judged done, per rule (the expert's own failed
episodes are listed, not counted as rule-made). ``report.md`` and ``summary.json`` go to
``--out``.

Run (about an hour on 2 CPUs, most of it recording; each step skips what is done)::

    .venv/bin/python bench/l1_libero_progress.py --data runs/l1 --record --fit \\
        --out bench/results/l1_libero_progress
    .venv/bin/python bench/l1_libero_progress.py --data runs/l1 \\
        --out bench/results/l1_libero_progress
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

from evolve_envs.cli.main import main as cli
from evolve_envs.envs.libero_expert import BEHAVIOURS
from evolve_envs.recording.episodes import open_recording

RULES = tuple(b for b in BEHAVIOURS if b != "expert")
SPLITS = {  # split -> [(init states, behaviours)]
    "train": [("0-7", "expert"), ("0", ",".join(RULES))],
    "held_out": [("40-42", "expert"), ("40", ",".join(RULES))],
}


def record(data: Path, tasks: str, image_size: int) -> None:
    for split, parts in SPLITS.items():
        for inits, behaviours in parts:
            argv = ["demos", str(data / split), "--tasks", tasks, "--init-states", inits,
                    "--behaviours", behaviours, "--image-size", str(image_size)]  # fmt: skip
            if cli(argv) != 0:
                raise SystemExit(f"demos failed: {' '.join(argv)}")


def fit(data: Path, model: Path, epochs: int, seed: int, split: str = "train") -> None:
    argv = ["fit-reward", str(data / split), "--out", str(model), "--epochs", str(epochs),
            "--seed", str(seed), "--name", "libero-object-progress"]  # fmt: skip
    if cli(argv) != 0:
        raise SystemExit("fit-reward failed")


def subset(src: Path, dst: Path, keep_tasks: set[int] | None, drop: bool) -> Path:
    """A recording of ``src``'s episodes of ``keep_tasks`` (or of the others, with ``drop``):
    its own index over hard links to the same episode files."""
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "episodes").mkdir(parents=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    lines = []
    for line in (src / "episodes.jsonl").read_text().splitlines():
        episode = json.loads(line)
        task = int(episode["task_id"])
        if keep_tasks is None or ((task in keep_tasks) != drop):
            lines.append(line)
            os.link(src / episode["file"], dst / episode["file"])  # the same file, no copy
    (dst / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def judge(data: Path, model: Path, out: Path, held_out: Path | None = None) -> dict[str, object]:
    """Calibrate the held-out set and break the failures down by rule."""
    cal = out / "calibrate"
    held_out = held_out or data / "held_out"
    argv = ["calibrate", str(held_out), "--service", str(model),
            "--service", "mock:change", "--out", str(cal)]  # fmt: skip
    if cli(argv) != 0:
        raise SystemExit("calibrate failed")
    report = json.loads((cal / "report.json").read_text())
    behaviour = {
        str(ep.meta["episode_id"]): str(ep.meta.get("behaviour")) for ep in open_recording(held_out)
    }
    rows: dict[str, dict[str, object]] = {}
    for name, svc in report["services"].items():
        overall = svc["overall"]
        threshold = float(overall["threshold"])
        by_route: dict[str, list[bool]] = defaultdict(list)
        by_value: dict[str, list[bool]] = defaultdict(list)
        for ep in svc["episodes"]:
            if ep.get("success") or ep.get("error"):
                continue
            rule = behaviour.get(str(ep["episode_id"]), "?")
            by_route[rule].append(bool(ep.get("backend_done")))
            by_value[rule].append((ep.get("max_value") or 0.0) >= threshold)

        def share(table: dict[str, list[bool]]) -> dict[str, object]:
            made = [x for rule, v in table.items() if rule != "expert" for x in v]
            return {
                "rule_failures": len(made),
                "rule_failures_judged_done": sum(made),
                "by_rule": {r: f"{sum(v)}/{len(v)}" for r, v in sorted(table.items())},
            }

        label = f"fitted ({model.name})" if name == str(model) else name
        rows[label] = {
            "voc": overall["voc"],
            # the model's own decision: its /done route, at its fitted threshold
            "done": {**overall["backend_done"], **share(by_route)},
            # calibrate's: the episode's highest progress at or over `threshold` %
            "progress_done": {**overall["done"], "threshold": threshold, **share(by_value)},
        }
    return {"episodes": report["episodes"], "services": rows}


def render(summary: dict[str, object]) -> str:
    def num(x: object) -> str:
        return "–" if x is None else f"{float(x):.2f}"

    lines = [
        "| model | VOC | done by | precision | recall | rule-made failures judged done | by rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in summary["services"].items():
        threshold = row["progress_done"]["threshold"]
        for label, d in (
            ("`/done`", row["done"]),
            (f"progress ≥ {threshold:g} %", row["progress_done"]),
        ):
            rules = ", ".join(f"{r} {v}" for r, v in d["by_rule"].items())
            lines.append(
                f"| {name} | {num(row['voc'])} | {label} | {num(d['precision'])} | "
                f"{num(d['recall'])} | {d['rule_failures_judged_done']}/{d['rule_failures']} | "
                f"{rules} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="recordings go here")
    parser.add_argument("--model", type=Path, default=None, help="default: DATA/model")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--record", action="store_true", help="record what is missing first")
    parser.add_argument("--fit", action="store_true", help="fit the model first")
    parser.add_argument("--tasks", default="0-9")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--held-out-tasks", default="7,9", help="task ids the second fit omits")
    args = parser.parse_args(argv)
    model = args.model or args.data / "model"
    unseen = {int(t) for t in args.held_out_tasks.split(",") if t.strip()}
    if args.record:
        record(args.data, args.tasks, args.image_size)
    if args.fit:
        fit(args.data, model, args.epochs, args.seed)
    if args.fit and unseen:
        subset(args.data / "train", args.data / "train_without", unseen, drop=True)
        fit(args.data, args.data / "model_without", args.epochs, args.seed, "train_without")
    args.out.mkdir(parents=True, exist_ok=True)
    by_state = judge(args.data, model, args.out / "by_init_state")
    sections = [("by init state", by_state)]
    summary: dict[str, object] = {"by_init_state": by_state}
    if unseen and (args.data / "model_without").is_dir():
        held = subset(args.data / "held_out", args.data / "held_out_tasks", unseen, drop=False)
        by_task = judge(args.data, args.data / "model_without", args.out / "by_task", held)
        summary["by_task"] = {"held_out_tasks": sorted(unseen), **by_task}
        sections.append((f"by whole task (tasks {sorted(unseen)} never fitted)", by_task))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = "".join(f"Held out {name}:\n\n{render(part)}\n" for name, part in sections)
    (args.out / "report.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
