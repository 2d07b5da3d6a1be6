"""``evolve-envs demo`` (``make demo``): what a learned reward does to RL, on a CPU, in minutes.

Four parts: ReachPlace under a right and a gameable reward model with the hacking alarm, a
progress model fitted on those episodes, their calibration, and one LIBERO-10 episode under the
pixel-change mock (docs/getting-started.md walks through the output).

Usage (shell)::

    evolve-envs demo --no-libero --out runs/demo-rp
"""

from __future__ import annotations

import argparse
import importlib
import math
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = [
    "DEMO_NEEDS",
    "MODELS",
    "POLICIES",
    "GroupResult",
    "add_demo",
    "play_reach_place",
    "run_demo",
]

#: The two reward models of part 1: name -> the mock rule that serves it.
MODELS: dict[str, str] = {"right": "reach_place", "gameable": "reach_place_hackable"}
#: The scripted policies, in the order they play: name -> behaviour of ``scripted_action``.
POLICIES: dict[str, str] = {"random": "random", "gaming": "distractor", "solving": "task"}
STEPS = 40  # ReachPlace episode limit in the demo
SERVICES = ("mock:reach_place", "mock:reach_place_hackable", "mock:random")


def add_demo(sub: argparse._SubParsersAction) -> None:
    """The ``demo`` subcommand's arguments."""
    de = sub.add_parser("demo", help="what the library does, in minutes on a CPU (make demo)")
    de.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    de.add_argument(
        "--episodes", type=int, default=4, help="ReachPlace episodes per policy (default 4)"
    )
    de.add_argument("--no-libero", action="store_true", help="skip the LIBERO episode")
    de.add_argument(
        "--fit-epochs",
        type=int,
        default=40,
        help="epochs of the model fitted on the recorded episodes",
    )
    de.add_argument(
        "--libero-steps", type=int, default=300, help="the LIBERO episode's limit (default 300)"
    )


@dataclass
class GroupResult:
    """One policy's episodes under one reward model (means over the episodes).

    >>> g = GroupResult("gameable", "gaming", alarm={"ready": True, "firing": False})
    >>> g.alarm_text()
    'quiet'
    """

    model: str
    policy: str
    episodes: int = 0
    model_progress: list[float] = field(default_factory=list)
    true_progress: list[float] = field(default_factory=list)
    success: int = 0
    model_done: int = 0
    alarm: dict[str, JsonValue] = field(default_factory=dict)

    def alarm_text(self) -> str:
        """The alarm's state after these episodes, with its numbers when it fires."""
        a = self.alarm
        if not a.get("ready"):
            return "not ready (the baseline)"
        if not a.get("firing"):
            return "quiet"
        return (
            f"FIRING: model progress {a['progress_baseline']:.2f} -> {a['progress_recent']:.2f}, "
            f"env success {a['success_baseline']:.2f} -> {a['success_recent']:.2f}"
        )


def play_reach_place(
    rule: str,
    episodes: int,
    *,
    record: Path | None = None,
    name: str = "",
    model_dir: Path | None = None,
    fresh: bool = False,
) -> list[GroupResult]:
    """Play every policy of :data:`POLICIES` for ``episodes`` episodes under the mock ``rule``
    (or, with ``model_dir``, a fitted progress model served by the ``fitted`` backend; one env,
    so the alarm sees them in order), optionally recording them; one result each. ``fresh``
    plays other scenes than the default (those after them).

    Example (starts a reward service and plays 6 episodes; tests/cli/test_demo.py runs it)::

        >>> [g.policy for g in play_reach_place("reach_place", 2)]  # doctest: +SKIP
        ['random', 'gaming', 'solving']
    """
    from evolve_envs.envs.synthetic import scripted_action
    from evolve_envs.progress.hacking import RewardHackingWarning
    from evolve_envs.stack.factory import make_env
    from evolve_envs.stack.loading import load_config

    base = load_config("reach_place").model_dump(exclude_unset=True)
    if model_dir is not None:  # the whole kwargs block: the mock's rule is no fitted kwarg
        kwargs = {"ckpt_path": str(model_dir)}
        base["reward_model"].update(embedded_backend="fitted", embedded_backend_kwargs=kwargs)
    else:
        base["reward_model"]["embedded_backend_kwargs"] = {"rule": rule}
    overrides: dict[str, JsonValue] = {
        "env": {"max_episode_steps": STEPS},
        "reward_model": {
            "start_step": 10,
            "call_every": 10,
            "check_at_episode_end": True,
            "alarm": {"enable": True, "window": episodes, "baseline": episodes},
        },
    }
    if record is not None:
        overrides["record"] = {"dir": str(record), "camera": "image"}
    from evolve_envs.envs.synthetic import clean_gaming_seeds

    n = len(POLICIES) * episodes
    seeds = clean_gaming_seeds(2 * n if fresh else n, STEPS, search=200 * n)[-n:]
    rng = np.random.default_rng(0)
    env = make_env([base, overrides])
    results = []
    try:
        with warnings.catch_warnings():  # the table shows the alarm; no warning text on top
            warnings.simplefilter("ignore", RewardHackingWarning)
            for p, (policy, behaviour) in enumerate(POLICIES.items()):
                group = GroupResult(name or rule, policy)
                for k in range(episodes):
                    _, info = env.reset(seed=seeds[p * episodes + k])
                    start = float(info["true_progress"])
                    for _ in range(STEPS):
                        action = (
                            rng.uniform(-1, 1, 2).astype(np.float32)
                            if behaviour == "random"
                            else scripted_action(env.unwrapped, behaviour)
                        )
                        *_, terminated, truncated, info = env.step(action)
                        if terminated or truncated:
                            break
                    summary = info["episode_reward_model"]
                    end = float(info["true_progress"])
                    group.episodes += 1
                    group.model_progress.append(float(summary["progress"]))
                    # the model's measure: the share of the way left at the first frame that
                    # was covered, in [0, 100] (the model's progress never goes below 0)
                    made = 100.0 * (end - start) / max(1e-9, 1.0 - start)
                    group.true_progress.append(min(100.0, max(0.0, made)))
                    group.success += bool(info["is_success"])
                    group.model_done += bool(summary.get("done_by_progress"))
                    group.alarm = dict(info["reward_alarm"])
                results.append(group)
    finally:
        env.close()
    return results


def _reach_place_table(groups: list[GroupResult]) -> str:
    head = (
        "reward model",
        "policy",
        "model progress",
        "true progress",
        "env success",
        "model said done",
        "hacking alarm (after these episodes)",
    )
    rows = [head]
    for g in groups:
        n = g.episodes
        rows.append(
            (
                g.model,
                g.policy,
                f"{np.mean(g.model_progress):.0f} %",
                f"{np.mean(g.true_progress):.0f} %",
                f"{g.success}/{n}",
                f"{g.model_done}/{n}",
                g.alarm_text(),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return "\n".join(
        "  ".join(
            v.ljust(widths[c]) if c in (0, 1, 6) else v.rjust(widths[c]) for c, v in enumerate(r)
        ).rstrip()
        for r in rows
    )


def _calibration_lines(report: dict[str, JsonValue]) -> list[str]:
    from evolve_envs.cli.reports.calibrate import ranking

    def num(v: JsonValue, fmt: str = ".2f") -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    lines = []
    for name, svc in report["services"].items():
        m = svc["overall"]
        name = name if name.startswith("mock:") else "fitted (fit-reward)"
        lines.append(
            f"   {name:27s} VOC {num(m['voc']):>5}  done precision {num(m['done']['precision'])}"
            f"  done recall {num(m['done']['recall'])}  failures judged done "
            f"{m['failures_judged_high']}/{m['scored'] - m['successes']}"
        )
    lines.append(
        "   (VOC = how steadily the model's values rise through a successful episode, 1 at best;"
        "\n    done precision / recall = its 'done' at 95 % against the env's success flag)"
    )
    for line in ranking(report):  # one part per line; latency says nothing about trust here
        for part in line.removeprefix("Ranking, best first — ").rstrip(".").split("; "):
            if part and not part.startswith("by latency"):
                lines.append("   ranking, best first, " + part.replace("`", ""))
    return lines


#: What the demo imports, and the extra that brings it (``make demo`` installs them all).
DEMO_NEEDS: dict[str, str] = {
    "pyarrow": "record",
    "matplotlib": "report",
    "tqdm": "report",
    "fastapi": "service",
    "libero": "libero",
    "imageio_ffmpeg": "video",
    "torch": "fit",
    "safetensors": "fit",
}


def _check_extras(libero: bool) -> None:
    """One line naming the extra, before anything runs."""
    for module, extra in DEMO_NEEDS.items():
        if not libero and extra in ("libero", "video"):
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(
                f"the demo needs {module}: pip install 'evolve-envs[{extra}]' "
                "(make demo installs every extra it uses)"
            ) from exc


_INTRO = """\
1. ReachPlace: a synthetic pick-and-place task whose env knows its true progress.
   {n} episodes per policy, {steps} steps at most, rewards from the reward service (embedded).
   reward models: right = mock rule reach_place (reads the red block from the pixels)
                  gameable = mock rule reach_place_hackable (reads the yellow distractor instead)
   policies: random (the alarm's baseline), gaming (drags the distractor to the green zone and
             never touches the block), solving (the scripted expert)"""

_LEGEND = """\
   model progress = the reward model's final judgement of the episode, in percent;
   true progress  = the env's ground truth (info['true_progress']) counted the model's way: the
                    share of the way from the first frame to done that was covered (never < 0);
   env success    = the env's own success flag; model said done = its progress reached 0.95"""

_LIBERO_NOTE = """\
   The mock's change rule is a stand-in, not a reward model: an arm that moves a lot scores high
   whatever it does. For task progress set reward_model.endpoint to a real reward model's
   service (docs/reward-models.md)."""


def _fit(rec: Path, out: Path, epochs: int) -> Path:
    """Fit a progress model on the recorded episodes (part 2) and say what it is."""
    from evolve_envs.reward.fitting.trainer import FitOptions, fit_reward

    start = time.monotonic()
    print(
        f"\n2. A learned reward model: evolve-envs fit-reward fits a progress model (frame + task"
        f" -> progress)\n   on the episodes recorded under the right model ({epochs} epochs):",
        flush=True,
    )
    report = fit_reward(
        FitOptions(
            str(rec),
            str(out),
            epochs=epochs,
            held_out=0.25,
            progress=False,
            name="demo-reach-place",
        )
    )
    held = report["held_out"]

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(
        f"   wrote {out} ({report['content_hash']}, {report['size_bytes'] // 1024} KiB, "
        f"{time.monotonic() - start:.0f} s): on its {held['episodes']} held-out episodes VOC "
        f"{num(held['voc'])}, done precision {num(held['done_precision'])} recall "
        f"{num(held['done_recall'])}"
    )
    return out


#: LIBERO-Object task 0's init state the demo plays: one the shipped model never saw.
LIBERO_SCENE = 45


def _learned_libero(out: Path) -> None:
    """Part 5: the shipped LIBERO-Object progress model beside the pixel-change rule, on an
    episode of the scripted expert and a random one (LIBERO-Object task 0, an unseen scene)."""
    from evolve_envs.cli.calibrate import calibrate
    from evolve_envs.cli.demos import record_demos
    from evolve_envs.recording.episodes import open_recording
    from evolve_envs.reward.models import shipped_model

    part = time.monotonic()
    print(
        "\n5. LIBERO-Object task 0 with a learned reward: the shipped progress model (fitted here "
        "on\n   scripted demonstrations, docs/fit-reward.md) beside the pixel-change rule, on the "
        "scripted\n   expert's episode and a random one:",
        flush=True,
    )
    if out.exists():
        shutil.rmtree(out)
    # init state 45: a scene the model was neither fitted nor judged on
    record_demos(out, "libero_object", [(0, LIBERO_SCENE, "expert")], image_size=64)
    record_demos(out, "libero_object", [(0, LIBERO_SCENE, "random")], image_size=64, max_steps=100)
    model = shipped_model("libero_object")
    report = calibrate([str(out)], [str(model), "mock:change"], threshold=95.0)
    behaviour = {str(ep.meta["episode_id"]): ep.meta["behaviour"] for ep in open_recording(out)}
    rows = ["episode   env success  learned model (final / max)  pixel change (final / max)"]
    scored = {name: svc["episodes"] for name, svc in report["services"].items()}
    learned, pixel = scored[str(model)], scored["mock:change"]
    for a, b in zip(learned, pixel, strict=True):
        rows.append(
            f"{behaviour[str(a['episode_id'])]:<9} {'yes' if a['success'] else 'no':>11}  "
            f"{a['final_value']:>13.0f} % / {a['max_value']:.0f} %  "
            f"{b['final_value']:>14.0f} % / {b['max_value']:.0f} %"
        )
    print(_indent("\n".join(rows)))
    print(
        "   A reward should be high for the expert (the soup in the basket) and lower for the "
        "random arm;\n   the pixel-change rule pays motion, whatever moves."
        f" ({time.monotonic() - part:.0f} s)"
    )


def _indent(text: str, by: str = "   ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def run_demo(args: argparse.Namespace) -> int:
    """Run the four parts and print what they show (exit status 0)."""
    if args.episodes < 2:
        raise ValueError(
            f"--episodes must be >= 2 (the alarm compares windows), got {args.episodes}"
        )
    if args.libero_steps < 1:
        raise ValueError(f"--libero-steps must be >= 1, got {args.libero_steps}")
    _check_extras(not args.no_libero)
    from evolve_envs.cli.calibrate import calibrate
    from evolve_envs.cli.reports.calibrate import write_report

    t0 = part = time.monotonic()
    out = Path(args.out)
    rec = out / "reach_place" / "episodes"
    held = out / "reach_place" / "held_out"  # scenes the fitted model never saw
    for old in (rec, held, out / "reach_place" / "model"):  # a recording appends: start afresh
        if old.exists():
            shutil.rmtree(old)
    n = args.episodes
    print(_INTRO.format(n=n, steps=STEPS), flush=True)
    groups = []
    for model, rule in MODELS.items():
        groups += play_reach_place(rule, n, record=rec if model == "right" else None, name=model)
    print(f"\n{_LEGEND}\n\n{_indent(_reach_place_table(groups))}")
    fired = [f"{g.model}/{g.policy}" for g in groups if g.alarm.get("firing")]
    took = time.monotonic() - part
    print(f"\n   the hacking alarm fired on: {', '.join(fired) or 'nothing'} ({took:.0f} s)")

    part = time.monotonic()
    model = _fit(rec, out / "reach_place" / "model", args.fit_epochs)
    fitted = play_reach_place("", n, name="fitted", model_dir=model, fresh=True, record=held)
    table = _indent(_reach_place_table(fitted))
    print(
        f"\n   the fitted model (served by the fitted backend) under the same three policies, "
        f"on {3 * n} scenes\n   it was not fitted on:\n\n{table}"
    )
    fired = [g.policy for g in fitted if g.alarm.get("firing")]
    print(f"\n   the hacking alarm fired on: {', '.join(fired) or 'nothing'}")
    print(
        f"\n3. Which reward model to trust? evolve-envs calibrate re-scores the {3 * n} episodes "
        "just played\n   on scenes the fitted model never saw, with each model, and checks its "
        "judgement against\n   the env's success flag:",
        flush=True,
    )
    report = calibrate([str(held)], [str(model), *SERVICES], threshold=95.0)
    write_report(report, out / "reach_place" / "calibration")
    print("\n".join(_calibration_lines(report)))
    print(f"   ({time.monotonic() - part:.0f} s; report in {out / 'reach_place' / 'calibration'})")

    if not args.no_libero:
        from evolve_envs.cli.rollout import RolloutOptions, run_rollout

        part = time.monotonic()
        print(
            f"\n4. LIBERO-10 task 0: one random episode ({args.libero_steps} steps at most, the "
            "agentview camera at 128 px)\n   through the full stack, rewards from the shipped "
            "config's embedded mock:",
            flush=True,
        )
        libero = run_rollout(
            RolloutOptions(
                config="libero_10",
                task_id=0,
                episodes=1,
                max_steps=args.libero_steps,
                out=out / "libero",
                overrides=["env.image_size=128", "env.cameras=[agentview]"],
            )
        )
        print(f"{_indent(libero.table)}\n{_LIBERO_NOTE} ({time.monotonic() - part:.0f} s)")
        _learned_libero(out / "libero_object")
    libero_files = (
        ""
        if args.no_libero
        else ", libero/ (summary, metrics, plot, video), libero_object/ (recording, calibration)"
    )
    print(
        f"\nwrote {out}: reach_place/ (recording, fitted model, calibration report)"
        f"{libero_files} ({time.monotonic() - t0:.0f} s)"
    )
    return 0
