"""``evolve-envs calibrate``: how right is a reward model on recorded episodes?

Re-scores recorded episodes (:mod:`wrappers.recording`; ``evolve-envs rollout --record DIR``) with
one or more reward services and writes a report (``report.json``, ``report.md``, PNGs) per task
and overall. Each episode's frames (at most ``max_frames``, evenly spaced, first and last kept) go
to ``/trajectory-critic`` in one call; its ``value_list`` (progress in percent relative to the
first frame, VLAC's accumulation) is the model's judgement of the episode. Measured against the
env's success flag:

* **done at the threshold**: the model says *done* when an episode's highest value reaches
  ``threshold`` (percent); precision, recall and F1 against success, and the same across
  thresholds 0..100 (the precision-recall curve and the threshold with the best F1);
* **Value-Order Correlation** (VOC): Spearman's rank correlation of the values with frame order on
  successful episodes (1 = progress rises steadily; the metric of GVL and VLAC);
* the two failure modes: **failures judged high** (max value >= threshold on a failed episode)
  and **successes judged low** (final value < threshold on a successful one), with the mean
  progress at success and the mean maximum progress on failures;
* **negative-critic rate** (critics < 0) and **latency** (p50/p95 of one call).

Services are URLs or ``mock:<rule>`` for a local mock service (e.g. ``mock:reach_place``).

Example:
    >>> import numpy as np
    >>> round(spearman(np.arange(5), np.array([0, 10, 5, 30, 40])), 2)
    0.9
    >>> pr = pr_metrics(np.array([99, 20, 97, 96]), np.array([True, False, True, False]), 95)
    >>> pr["precision"], pr["recall"]
    (0.6666666666666666, 1.0)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wrappers.recording import RecordedEpisode, open_recording

__all__ = [
    "EpisodeScore",
    "calibrate",
    "pr_metrics",
    "spearman",
    "service_metrics",
    "write_report",
]


@dataclass
class EpisodeScore:
    """One episode as one service judged it."""

    task: str
    success: bool
    values: list[float]
    critics: list[float]
    indices: list[int]
    latency_s: float
    ok: bool
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def max_value(self) -> float:
        return max(self.values) if self.values else math.nan

    @property
    def final_value(self) -> float:
        return self.values[-1] if self.values else math.nan


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):  # average ranks of ties
        tie = x == value
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (ties get average ranks); NaN when either side is constant."""
    rx, ry = _ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, dtype=np.float64))
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def pr_metrics(scores: np.ndarray, success: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision/recall/F1 of "done when score >= threshold" against ``success``."""
    pred = np.asarray(scores) >= threshold
    truth = np.asarray(success, dtype=bool)
    tp = int(np.sum(pred & truth))
    fp = int(np.sum(pred & ~truth))
    fn = int(np.sum(~pred & truth))
    precision = tp / (tp + fp) if tp + fp else math.nan
    recall = tp / (tp + fn) if tp + fn else math.nan
    f1 = (
        2 * precision * recall / (precision + recall)
        if tp and not math.isnan(precision + recall)
        else 0.0
    )
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def _mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def service_metrics(scores: Sequence[EpisodeScore], threshold: float) -> dict[str, Any]:
    """Every metric of the module docstring for one service over ``scores`` (percent units)."""
    ok = [s for s in scores if s.ok and s.values]
    success = np.array([s.success for s in ok], dtype=bool)
    max_v = np.array([s.max_value for s in ok], dtype=np.float64)
    final_v = np.array([s.final_value for s in ok], dtype=np.float64)
    at = pr_metrics(max_v, success, threshold)
    curve = [{"threshold": float(t), **pr_metrics(max_v, success, float(t))} for t in range(0, 101)]
    best = max(curve, key=lambda row: (row["f1"], row["threshold"]))
    vocs = [spearman(s.indices, s.values) for s in ok if s.success and len(s.values) > 2]
    critics = [c for s in ok for c in s.critics]
    latencies = [s.latency_s for s in scores if s.ok]
    return {
        "episodes": len(scores),
        "scored": len(ok),
        "failed_calls": len(scores) - len(ok),
        "successes": int(success.sum()),
        "threshold": threshold,
        "done": at,
        "best_threshold": {k: best[k] for k in ("threshold", "precision", "recall", "f1")},
        "pr_curve": curve,
        "voc": _mean(vocs),
        "voc_episodes": len([v for v in vocs if not math.isnan(v)]),
        "progress_at_success": _mean(list(final_v[success])),
        "max_progress_on_failure": _mean(list(max_v[~success])),
        "failures_judged_high": int(np.sum((max_v >= threshold) & ~success)),
        "successes_judged_low": int(np.sum((final_v < threshold) & success)),
        "negative_critic_rate": (float(np.mean(np.array(critics) < 0)) if critics else None),
        "latency_p50_s": float(np.percentile(latencies, 50)) if latencies else None,
        "latency_p95_s": float(np.percentile(latencies, 95)) if latencies else None,
    }


def _frame_indices(length: int, max_frames: int) -> list[int]:
    """Evenly spaced step indices over 0..length (first and last kept), at most max_frames."""
    n = length + 1
    if n <= max_frames:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max_frames)})


def score_episode(client: Any, episode: RecordedEpisode, max_frames: int) -> EpisodeScore:
    """Score one recorded episode with a :class:`~reward_clients.progress_client.ProgressClient`."""
    indices = _frame_indices(len(episode), max_frames)
    frames = list(episode.frames(indices))
    task = str(episode.meta.get("task") or "complete the task")
    result = client.trajectory_values(task, frames, skip=1)
    tv = result.value
    ok = bool(result.ok and tv is not None)
    return EpisodeScore(
        task=task,
        success=bool(episode.meta.get("success", False)),
        values=[float(v) for v in tv.value_list] if ok else [],
        critics=[float(c) for c in tv.critic_list] if ok else [],
        indices=indices,
        latency_s=float(result.latency_s),
        ok=ok,
        error=result.error,
        meta={k: episode.meta.get(k) for k in ("episode_id", "seed", "init_state_id")},
    )


@contextlib.contextmanager
def _service_url(spec: str) -> Iterator[str]:
    """A URL for a service spec: a URL as is, or ``mock:<rule>`` started here."""
    if spec.startswith(("http://", "https://")):
        yield spec
        return
    backend, _, rule = spec.partition(":")
    if backend != "mock":
        raise ValueError(f"service {spec!r}: expected a URL or mock:<rule> (e.g. mock:reach_place)")
    from reward_service.embedded import EmbeddedService

    svc = EmbeddedService("mock", {"rule": rule or "change"})
    svc.start()
    try:
        yield svc.url
    finally:
        svc.stop()


def calibrate(
    recordings: Sequence[str | os.PathLike[str]],
    services: Sequence[str],
    *,
    threshold: float = 95.0,
    max_frames: int = 32,
    token: str | None = None,
) -> dict[str, Any]:
    """Score every recorded episode with every service; the report as a dict (see module doc).

    ``threshold`` is in percent (0..100), like the values.
    """
    from reward_clients.endpoint_pool import EndpointPool
    from reward_clients.progress_client import ProgressClient

    if not services:
        raise ValueError("give at least one service (a URL or mock:<rule>)")
    if not 0 <= threshold <= 100:
        raise ValueError(f"threshold is in percent (0..100), got {threshold}")
    episodes = [ep for root in recordings for ep in open_recording(root)]
    if not episodes:
        raise ValueError(f"no recorded episodes in {', '.join(map(str, recordings))}")
    report: dict[str, Any] = {
        "recordings": [str(r) for r in recordings],
        "episodes": len(episodes),
        "threshold": threshold,
        "services": {},
    }
    per_service_scores: dict[str, list[EpisodeScore]] = {}
    for spec in services:
        with _service_url(spec) as url:
            pool = EndpointPool([url], token=token or os.environ.get("EVOLVE_REWARD_TOKEN"))
            client = ProgressClient(pool, max_workers=1)
            try:
                scores = [score_episode(client, ep, max_frames) for ep in episodes]
            finally:
                client.close()
                pool.close()
        per_service_scores[spec] = scores
        tasks = sorted({s.task for s in scores})
        report["services"][spec] = {
            "overall": service_metrics(scores, threshold),
            "per_task": {
                t: service_metrics([s for s in scores if s.task == t], threshold) for t in tasks
            },
            "episodes": [
                {
                    **s.meta,
                    "task": s.task,
                    "success": s.success,
                    "max_value": s.max_value if s.ok else None,
                    "final_value": s.final_value if s.ok else None,
                    "values": s.values,
                    "indices": s.indices,
                    "error": s.error,
                }
                for s in scores
            ],
        }
    report["_scores"] = per_service_scores
    return report


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _markdown(report: dict[str, Any], plots: list[str]) -> str:
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
        "32 evenly spaced frames per episode. *Done* means the episode's highest value reached "
        "the threshold; success is the env's flag. VOC is Spearman's correlation of the values "
        "with frame order on successful episodes.",
    ]
    return "\n".join(lines) + "\n"


def _plots(report: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
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
    fig.savefig(out / "pr_curve.png", dpi=110)
    plt.close(fig)
    names.append("pr_curve.png")
    n = len(report["services"])
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (name, svc) in zip(axes[0], report["services"].items(), strict=True):
        for ep in svc["episodes"]:
            if not ep["values"]:
                continue
            x = np.asarray(ep["indices"], dtype=float)
            x = x / max(x[-1], 1.0)
            color = "tab:green" if ep["success"] else "tab:red"
            ax.plot(x, ep["values"], color=color, alpha=0.5, lw=1)
        ax.axhline(report["threshold"], color="k", ls="--", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("episode time (fraction)")
        ax.set_ylim(-5, 105)
    axes[0][0].set_ylabel("model progress (%)")
    fig.suptitle("green: env success, red: failure; dashed: done threshold", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "progress_curves.png", dpi=110)
    plt.close(fig)
    names.append("progress_curves.png")
    return names


def write_report(report: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write ``report.json``, ``report.md`` and the PNGs into ``out``; returns the folder."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain = {k: v for k, v in report.items() if not k.startswith("_")}
    plots = _plots(plain, out)
    (out / "report.json").write_text(json.dumps(_clean(plain), indent=2, default=str))
    (out / "report.md").write_text(_markdown(plain, plots))
    return out


def _clean(value: Any) -> Any:
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
