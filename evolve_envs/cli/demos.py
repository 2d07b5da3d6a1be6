"""``evolve-envs demos``: LIBERO demonstrations and rule-made failures, with no download.

The scripted expert (:mod:`evolve_envs.envs.libero_expert`) plays each (task, init state,
behaviour) once, recorded with :class:`~evolve_envs.wrappers.record_episodes.RecordEpisodes`
into ``OUT``; ``--lerobot DIR`` then exports the recording as a LeRobotDataset v3 folder in the
layout of LeRobot's published LIBERO datasets. Episodes already in ``OUT`` are skipped, so a run
cut short goes on where it stopped. The expert's success rate per task is printed and written to
``OUT/demos_report.json``.

Usage (shell)::

    evolve-envs demos runs/libero-demos --suite libero_object --init-states 0-9
    evolve-envs demos runs/libero-demos --behaviours wrong_object,near_miss,drop,stall,random \\
        --init-states 0-1 --lerobot runs/libero-demos-lerobot
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

from evolve_envs.cli.errors import CliError, ExitStatus

__all__ = ["add_parser", "parse_range", "record_demos", "run"]


def parse_range(text: str) -> list[int]:
    """``"0-4,7"`` -> ``[0, 1, 2, 3, 4, 7]`` (inclusive ranges, in order, no repeats).

    >>> parse_range("0-2,5"), parse_range("3")
    ([0, 1, 2, 5], [3])
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise ValueError(f"{part!r}: the range runs backwards")
        out.extend(i for i in range(lo, hi + 1) if i not in out)
    if not out:
        raise ValueError(f"{text!r} names no number")
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``demos`` subcommand's options."""
    from evolve_envs.envs.libero_expert import BEHAVIOURS

    de = sub.add_parser(
        "demos", help="record scripted LIBERO demonstrations and rule-made failures"
    )
    de.add_argument("out", help="the recording folder (made, or continued where it stopped)")
    de.add_argument("--suite", default="libero_object", help="a LIBERO suite (libero_object)")
    de.add_argument("--tasks", default="0-9", help="task ids: 0-9, or 0,3,5 (default 0-9)")
    de.add_argument("--init-states", default="0-9", help="init state ids (default 0-9)")
    de.add_argument(
        "--behaviours",
        default="expert",
        help=f"comma-separated, of {', '.join(BEHAVIOURS)} (default expert)",
    )
    de.add_argument("--cameras", default="agentview", help="cameras to record (agentview,wrist)")
    de.add_argument("--image-size", type=int, default=128, help="frames are this square size")
    de.add_argument("--max-steps", type=int, default=None, help="default: the suite's limit")
    de.add_argument("--lerobot", default=None, help="also export a LeRobotDataset v3 folder here")
    de.add_argument("--no-progress", action="store_true", help="no progress bar")


def _done(out: Path) -> set[tuple[int, int, str]]:
    """(task id, init state, behaviour) of the episodes ``out`` holds already."""
    if not (out / "meta.json").is_file():
        return set()
    from evolve_envs.recording.episodes import open_recording

    return {
        (int(ep.meta["task_id"]), int(ep.meta["init_state_id"]), str(ep.meta["behaviour"]))
        for ep in open_recording(out)
        if "behaviour" in ep.meta
    }


def _bar(total: int, initial: int, enabled: bool) -> object | None:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="episode", desc="demos", dynamic_ncols=True)


def run(args: argparse.Namespace) -> int:
    """Run ``evolve-envs demos``."""
    from evolve_envs.envs.libero_expert import BEHAVIOURS
    from evolve_envs.envs.libero_tasks import check_suite

    try:
        check_suite(args.suite)
        tasks, inits = parse_range(args.tasks), parse_range(args.init_states)
    except ValueError as exc:
        raise CliError(str(exc), ExitStatus.USAGE) from None
    behaviours = [b.strip() for b in args.behaviours.split(",") if b.strip()]
    unknown = [b for b in behaviours if b not in BEHAVIOURS]
    if unknown or not behaviours:
        raise CliError(
            f"--behaviours: {', '.join(unknown) or 'none given'}; choose from "
            f"{', '.join(BEHAVIOURS)}",
            ExitStatus.USAGE,
        )
    if args.lerobot is not None and Path(args.lerobot).exists():
        raise CliError(f"{args.lerobot} exists; give a new folder with --lerobot", ExitStatus.USAGE)
    out = Path(args.out)
    start = time.perf_counter()
    played = record_demos(
        out,
        args.suite,
        [(t, i, b) for t in tasks for i in inits for b in behaviours],
        cameras=tuple(c.strip() for c in args.cameras.split(",") if c.strip()),
        image_size=args.image_size,
        max_steps=args.max_steps,
        progress=not args.no_progress,
    )
    report = _report(out, args.suite)
    (out / "demos_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{played} episode(s) recorded into {out} in {time.perf_counter() - start:.0f} s")
    for task, row in sorted(report["tasks"].items(), key=lambda kv: int(kv[0])):
        cells = ", ".join(f"{b} {n}/{row['played'][b]}" for b, n in row["succeeded"].items())
        print(f"  task {task}: {cells}  ({row['task']})")
    if args.lerobot is not None:
        from evolve_envs.recording.lerobot_export import export_lerobot

        export_lerobot(out, Path(args.lerobot))
        print(f"wrote {args.lerobot}: LeRobotDataset v3.0")
    return ExitStatus.OK


def record_demos(
    out: Path,
    suite: str,
    todo: list[tuple[int, int, str]],
    *,
    cameras: tuple[str, ...] = ("agentview",),
    image_size: int = 128,
    max_steps: int | None = None,
    progress: bool = False,
) -> int:
    """Play and record each (task id, init state, behaviour) of ``todo`` that ``out`` does not
    hold yet; returns how many were played. A task the expert cannot do is skipped, said once."""
    import gymnasium as gym

    from evolve_envs.envs.libero import LiberoEnv
    from evolve_envs.envs.libero_expert import ScriptedExpert, pick_place_goal
    from evolve_envs.envs.libero_tasks import default_max_episode_steps
    from evolve_envs.wrappers.record_episodes import RECORD_META, RecordEpisodes

    limit = max_steps or default_max_episode_steps(suite)
    done = _done(out)
    bar = _bar(len(todo), sum(key in done for key in todo), progress)
    played = 0
    for task in dict.fromkeys(t for t, _, _ in todo):
        keys = [(t, i, b) for t, i, b in todo if t == task and (t, i, b) not in done]
        if not keys:
            continue
        env = LiberoEnv(
            suite, task, cameras=cameras, image_size=image_size, render_cameras="on_demand"
        )
        try:
            pick_place_goal(env.problem)
        except ValueError as exc:
            env.close()
            print(f"task {task}: skipped ({exc})")
            continue
        recorder = RecordEpisodes(
            gym.wrappers.TimeLimit(env, limit),
            out,
            camera=f"{cameras[0]}_image",
            cameras=[f"{c}_image" for c in cameras],
            reward_model="none",
        )
        try:
            for _, init, behaviour in keys:
                meta = {"behaviour": behaviour, "rule_seed": init}
                recorder.reset(seed=init, options={"init_state_id": init, RECORD_META: meta})
                expert = ScriptedExpert(behaviour, seed=init)  # type: ignore[arg-type]
                expert.reset(env)
                ended = False
                while not ended:
                    _, _, terminated, truncated, _ = recorder.step(expert.act(env))
                    ended = terminated or truncated
                played += 1
                if bar is not None:
                    bar.update(1)
        finally:
            recorder.close()
    if bar is not None:
        bar.close()
    return played


def _report(out: Path, suite: str) -> dict[str, object]:
    """Episodes played and succeeded per task and behaviour, from the recording itself."""
    from evolve_envs.recording.episodes import open_recording

    played: dict[str, Counter[str]] = defaultdict(Counter)
    succeeded: dict[str, Counter[str]] = defaultdict(Counter)
    names: dict[str, str] = {}
    for ep in open_recording(out):
        if "behaviour" not in ep.meta:
            continue
        task, behaviour = str(ep.meta["task_id"]), str(ep.meta["behaviour"])
        names[task] = str(ep.meta.get("task", ""))
        played[task][behaviour] += 1
        succeeded[task][behaviour] += int(bool(ep.meta.get("success")))
    return {
        "suite": suite,
        "tasks": {
            task: {
                "task": names[task],
                "played": dict(played[task]),
                "succeeded": {b: succeeded[task][b] for b in played[task]},
            }
            for task in played
        },
    }
