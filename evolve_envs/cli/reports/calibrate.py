"""The calibration report: ``report.json``, ``report.md``, the PNGs and the one-line summary.

:func:`evolve_envs.cli.calibrate.calibrate` measures (scores, metrics); this module only presents
a finished report dict: the markdown tables and ranking, the matplotlib plots (the ``report``
extra), the JSON-safe copy, and :func:`summary_line` the CLI prints per service. It reads nothing
but that dict, so a saved ``report.json`` can be re-rendered without re-scoring.

Example:
    >>> report = {"threshold": 95.0, "episodes": 0, "recordings": ["rec"], "services": {}}
    >>> print(markdown(report, []).splitlines()[0])
    # Reward-model calibration
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from types import ModuleType

    from pydantic import JsonValue

__all__ = ["markdown", "ranking", "summary_line", "write_report"]


def _clamped(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def summary_line(name: str, m: dict[str, JsonValue], threshold: float) -> str:
    """One service's result on one line, every value inside its defined range (F1 in [0, 1],
    VOC in [-1, 1], progress in [0, 100] %) or ``–`` with the reason it is undefined; never nan.
    ``threshold`` is the done threshold as a fraction.

    >>> m = {"scored": 4, "episodes": 4, "successes": 0, "done": {"f1": 0.0}, "voc": None,
    ...      "voc_episodes": 0, "voc_flat_episodes": 0, "progress_at_success": None,
    ...      "max_progress_on_failure": -244.0, "failures_judged_high": 0,
    ...      "successes_judged_low": 0}
    >>> line = summary_line("mock:random", m, 0.95)
    >>> "nan" in line, "VOC – (no successes)" in line, "max progress on failure 0.0 %" in line
    (False, True, True)
    """
    successes = m["successes"]
    no_success = "– (no successes)"
    if successes:
        f1 = f"{_clamped(m['done']['f1'], 0.0, 1.0):.2f} at {threshold:g}"
    else:
        f1 = no_success
    voc = m["voc"]
    if not successes:
        voc_text = no_success
    elif m.get("voc_flat_episodes") and m["voc_flat_episodes"] == m.get("voc_episodes"):
        voc_text = "– (flat prediction)"
    elif voc is None or math.isnan(voc):
        voc_text = "– (successful episodes too short)"
    else:
        voc_text = f"{_clamped(voc, -1.0, 1.0):.2f}"

    def percent(value: float | None, reason: str) -> str:
        if value is None or math.isnan(value):
            return f"– ({reason})"
        return f"{_clamped(value, 0.0, 100.0):.1f} %"

    failures = m["scored"] - successes
    return (
        f"{name}: {m['scored']}/{m['episodes']} episodes scored, {successes} successes, "
        f"done F1 {f1}, VOC {voc_text}, "
        f"progress at success {percent(m['progress_at_success'], 'no successes')}, "
        f"max progress on failure "
        f"{percent(m['max_progress_on_failure'], 'no failures' if not failures else 'no values')}"
        f", failures judged high {m['failures_judged_high']}, "
        f"successes judged low {m['successes_judged_low']}"
    )


def _fmt(value: JsonValue) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{0.0 if abs(value) < 5e-4 else value:.3f}"  # no "-0.000"
    return str(value)


def markdown(report: dict[str, JsonValue], plots: list[str]) -> str:
    thr = report["threshold"]
    lines = [
        "# Reward-model calibration",
        "",
        f"{report['episodes']} recorded episodes from {', '.join(report['recordings'])}; "
        f"done threshold {thr:g} %.",
        "",
        "| service | scored | successes | done P | done R | done F1 | best thr (F1) | VOC | "
        "progress at success | max progress on failure | failures judged high | "
        "successes judged low | negative critics | p50 s | p95 s |",
        "|---" * 15 + "|",
    ]
    for name, svc in report["services"].items():
        m = svc["overall"]
        best = m["best_threshold"]
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{name}`",
                    f"{m['scored']}/{m['episodes']}",
                    str(m["successes"]),
                    _fmt(m["done"]["precision"]),
                    _fmt(m["done"]["recall"]),
                    _fmt(m["done"]["f1"]),
                    f"{best['threshold']:g} ({_fmt(best['f1'])})",
                    _fmt(m["voc"]),
                    _fmt(m["progress_at_success"]),
                    _fmt(m["max_progress_on_failure"]),
                    str(m["failures_judged_high"]),
                    str(m["successes_judged_low"]),
                    _fmt(m["negative_critic_rate"]),
                    _fmt(m["latency_p50_s"]),
                    _fmt(m["latency_p95_s"]),
                ]
            )
            + " |"
        )
    if any(svc["overall"]["successes"] for svc in report["services"].values()):
        lines += ranking(report)
    else:
        lines += [
            "",
            "**No episode here succeeded.** Done precision, recall, F1 and VOC need successful "
            "episodes: here they are undefined (–) or 0 by construction, say nothing about the "
            "model, and rank nothing. Only the failure counts (failures judged high, max progress "
            "on failure) measure something. Record episodes with successes to measure the rest.",
        ]
    asked = {n: v["overall"]["backend_done"] for n, v in report["services"].items()}
    asked = {n: m for n, m in asked.items() if m}
    if asked:
        lines += [
            "",
            "The service's own `/done` on each episode's last two scored frames, against success:",
            "",
            "| service | episodes | /done P | /done R | /done F1 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{n}` | {m['episodes']} | {_fmt(m['precision'])} | {_fmt(m['recall'])} | "
            f"{_fmt(m['f1'])} |"
            for n, m in asked.items()
        ]
    lines += ["", "## Per task", ""]
    for name, svc in report["services"].items():
        lines.append(f"### `{name}`")
        lines.append("")
        lines.append("| task | episodes | successes | done F1 | VOC | failures judged high |")
        lines.append("|---|---|---|---|---|---|")
        for task, m in svc["per_task"].items():
            lines.append(
                f"| {task} | {m['episodes']} | {m['successes']} | {_fmt(m['done']['f1'])} | "
                f"{_fmt(m['voc'])} | {m['failures_judged_high']} |"
            )
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += [
        "",
        "Values are the model's progress (percent, relative to the first frame) over up to "
        f"{report.get('max_frames', 32)} evenly spaced frames per episode (`recorded`: the "
        "progress the model reported at its checks during the run). *Done* means the episode's "
        "highest value reached the threshold; success is the env's flag. VOC is Spearman's "
        "correlation of the values with frame order on successful episodes (a flat prediction "
        "counts as 0: it orders nothing); – marks a value with nothing to measure it on.",
    ]
    return "\n".join(lines) + "\n"


def ranking(report: dict[str, JsonValue]) -> list[str]:
    """One line ranking the services by VOC, done precision, done recall (higher first) and
    latency p50 (lower first), with two or more services."""
    services = report["services"]
    if len(services) < 2:
        return []
    parts = []
    for label, get, higher_first in (
        ("VOC", lambda m: m["voc"], True),
        ("done precision", lambda m: m["done"]["precision"], True),
        ("done recall", lambda m: m["done"]["recall"], True),
        ("latency p50 (s)", lambda m: m["latency_p50_s"], False),
    ):
        vals = {n: get(svc["overall"]) for n, svc in services.items()}
        defined = {n: v for n, v in vals.items() if v is not None and not math.isnan(v)}
        if not defined:
            continue
        order = sorted(defined, key=lambda n: -defined[n] if higher_first else defined[n])
        text = f"`{order[0]}` ({_fmt(defined[order[0]])})"
        for prev, name in zip(order, order[1:], strict=False):
            better = ">" if higher_first else "<"
            text += f" {'=' if defined[name] == defined[prev] else better} `{name}` "
            text += f"({_fmt(defined[name])})"
        undefined = [n for n in vals if n not in defined]
        if undefined:
            text += "; undefined: " + ", ".join(f"`{n}`" for n in undefined)
        parts.append(f"by {label}: {text}")
    return ["", "Ranking, best first — " + "; ".join(parts) + "."] if parts else []


def _plots(report: dict[str, JsonValue], out: Path, prefix: str = "") -> list[str]:
    """Draw the PNGs into ``out`` (names start with ``prefix``); returns their file names.

    The precision-recall curve needs a successful episode (recall is undefined without one) and
    is left out when no service has one."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(
            "the calibration plots need matplotlib: pip install 'evolve-envs[report]'"
        ) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    if any(svc["overall"]["successes"] for svc in report["services"].values()):
        names.append(_pr_plot(report, out / f"{prefix}pr_curve.png", plt))
    names.append(_progress_plot(report, out / f"{prefix}progress_curves.png", plt))
    tasks = sorted({t for svc in report["services"].values() for t in svc["per_task"]})
    if len(tasks) > 1:
        names.append(_per_task_plot(report, tasks, out / f"{prefix}per_task.png", plt))
    return names


def _pr_plot(report: dict[str, JsonValue], png: Path, plt: ModuleType) -> str:
    """Done precision against recall across thresholds, one line per service."""
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, svc in report["services"].items():
        curve = svc["overall"]["pr_curve"]
        pts = [(r["recall"], r["precision"]) for r in curve if not math.isnan(r["precision"])]
        if pts:
            rec, prec = zip(*pts, strict=True)
            ax.plot(rec, prec, marker=".", label=name)
    ax.set_xlabel("recall (done vs env success)")
    ax.set_ylabel("precision")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Done: precision-recall across thresholds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png.name


def _progress_plot(report: dict[str, JsonValue], png: Path, plt: ModuleType) -> str:
    """Each episode's values over episode time, one panel per service."""
    n = len(report["services"])
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (name, svc) in zip(axes[0], report["services"].items(), strict=True):
        for ep in svc["episodes"]:
            if not ep["values"]:
                continue
            x = np.asarray(ep["indices"], dtype=float)
            x = x / max(ep.get("length") or x[-1], 1.0)
            color = "tab:green" if ep["success"] else "tab:red"
            ax.plot(x, ep["values"], color=color, alpha=0.5, lw=1)
        ax.axhline(report["threshold"], color="k", ls="--", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("episode time (fraction)")
        ax.set_ylim(-5, 105)
    axes[0][0].set_ylabel("model progress (%)")
    fig.suptitle("green: env success, red: failure; dashed: done threshold", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png.name


def _per_task_plot(
    report: dict[str, JsonValue], tasks: list[str], png: Path, plt: ModuleType
) -> str:
    """Done F1 and VOC per task, one bar per service (only drawn with several tasks)."""
    services = list(report["services"])
    width = 0.8 / len(services)
    fig, axes = plt.subplots(2, 1, figsize=(max(5.0, 1.2 * len(tasks) + 2), 5.5), sharex=True)
    for k, name in enumerate(services):
        per_task = report["services"][name]["per_task"]
        xs = np.arange(len(tasks)) + k * width
        f1 = [per_task.get(t, {}).get("done", {}).get("f1", math.nan) for t in tasks]
        voc = [per_task.get(t, {}).get("voc") for t in tasks]
        axes[0].bar(xs, f1, width, label=name)
        axes[1].bar(xs, [math.nan if v is None else v for v in voc], width, label=name)
    axes[0].set_ylabel("done F1")
    axes[1].set_ylabel("VOC (successes)")
    axes[1].axhline(0, color="k", lw=0.6)
    axes[1].set_xticks(np.arange(len(tasks)) + 0.4 - width / 2)
    axes[1].set_xticklabels(
        [t if len(t) <= 28 else t[:26] + "…" for t in tasks], rotation=20, ha="right", fontsize=7
    )
    axes[0].legend(fontsize=7)
    axes[0].set_title("Per task")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png.name


def write_report(
    report: dict[str, JsonValue], out: str | os.PathLike[str], *, prefix: str = ""
) -> Path:
    """Write ``report.json``, ``report.md`` and the PNGs into ``out``; returns the folder.

    Every file name starts with ``prefix`` (``prefix="cal_"``: ``cal_report.md`` links
    ``cal_progress_curves.png``), so several reports can share one folder and keep their links."""
    if "/" in prefix or os.sep in prefix:
        raise ValueError(f"prefix is part of a file name, not a path: {prefix!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain = {k: v for k, v in report.items() if not k.startswith("_")}
    plots = _plots(plain, out, prefix)
    (out / f"{prefix}report.json").write_text(json.dumps(_clean(plain), indent=2, default=str))
    (out / f"{prefix}report.md").write_text(markdown(plain, plots))
    return out


def _clean(value: object) -> JsonValue:
    """JSON-safe copy: NaN becomes null, NumPy scalars plain numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
