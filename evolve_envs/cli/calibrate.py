"""``evolve-envs calibrate``: how right is a reward model on recorded episodes?

Re-scores recorded episodes (:mod:`evolve_envs.recording.episodes`; ``evolve-envs rollout --record
DIR``) with one or more reward services and writes a report (``report.json``, ``report.md``, PNGs)
per task and overall. Each episode's frames (at most ``max_frames``, evenly spaced, first and last
kept) go to ``/trajectory-critic`` in one call; its ``value_list`` (progress in percent relative to
the first frame, VLAC's accumulation) is the model's judgement of the episode. Measured against the
env's success flag:

* **done at the threshold**: the model says *done* when an episode's highest value reaches
  ``threshold`` (percent); precision, recall and F1 against success, and the same across
  thresholds 0..100 (the precision-recall curve and the threshold with the best F1);
* **Value-Order Correlation** (VOC): Spearman's rank correlation of the values with frame order on
  successful episodes (1 = progress rises steadily; the metric of GVL and VLAC). A flat
  prediction (the same value at every frame) says nothing about order: its VOC is 0, not
  undefined, so a model that never moves ranks below one that follows the task;
* the two failure modes: **failures judged high** (max value >= threshold on a failed episode)
  and **successes judged low** (final value < threshold on a successful one), with the mean
  progress at success and the mean maximum progress on failures;
* **negative-critic rate** (critics < 0) and **latency** (p50/p95 of one call).

Services are URLs, ``mock:<rule>`` for a local mock service (e.g. ``mock:reach_place``), or
``recorded``: no service, the progress the reward model reported at its checks while the episodes
were recorded (``model_progress``), judged the same way (no critics, no latency).

Example:
    >>> import numpy as np
    >>> round(spearman(np.arange(5), np.array([0, 10, 5, 30, 40])), 2)
    0.9
    >>> value_order_correlation([0, 1, 2], [0.0, 0.0, 0.0])  # flat: says nothing about order
    0.0
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

from evolve_envs.recording.episodes import RecordedEpisode, open_recording
from evolve_envs.recording.shipped import resolve_recording

__all__ = [
    "EpisodeScore",
    "calibrate",
    "check_services",
    "pr_metrics",
    "spearman",
    "service_metrics",
    "summary_line",
    "value_order_correlation",
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
    latency_s: float | None
    ok: bool
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: the service's ``/done`` verdict on the last scored frames (None: not asked or failed)
    backend_done: bool | None = None

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


def value_order_correlation(
    indices: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray
) -> float:
    """VOC of one episode: Spearman of ``values`` against frame order ``indices``.

    A flat prediction (every value equal) is 0: it orders nothing, and counts as such instead of
    dropping out of the mean. NaN with fewer than two frames.
    """
    vals = np.asarray(values, dtype=np.float64)
    if len(vals) >= 2 and np.all(vals == vals[0]):
        return 0.0
    return spearman(indices, vals)


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
    vocs = [
        value_order_correlation(s.indices, s.values) for s in ok if s.success and len(s.values) > 2
    ]
    critics = [c for s in ok for c in s.critics]
    latencies = [s.latency_s for s in scores if s.ok and s.latency_s is not None]
    asked = [s for s in scores if s.backend_done is not None]
    backend_done = (
        pr_metrics(
            np.array([float(s.backend_done) for s in asked]),
            np.array([s.success for s in asked], dtype=bool),
            0.5,
        )
        | {"episodes": len(asked)}
        if asked
        else None
    )
    return {
        "episodes": len(scores),
        "scored": len(ok),
        "failed_calls": len(scores) - len(ok),
        "successes": int(success.sum()),
        "threshold": threshold,
        "done": at,
        "backend_done": backend_done,
        "best_threshold": {k: best[k] for k in ("threshold", "precision", "recall", "f1")},
        "pr_curve": curve,
        "voc": _mean(vocs),
        "voc_episodes": len([v for v in vocs if not math.isnan(v)]),
        "voc_flat_episodes": sum(
            1 for s in ok if s.success and len(s.values) > 2 and len(set(s.values)) == 1
        ),
        "progress_at_success": _mean(list(final_v[success])),
        "max_progress_on_failure": _mean(list(max_v[~success])),
        "failures_judged_high": int(np.sum((max_v >= threshold) & ~success)),
        "successes_judged_low": int(np.sum((final_v < threshold) & success)),
        "negative_critic_rate": (float(np.mean(np.array(critics) < 0)) if critics else None),
        "latency_p50_s": float(np.percentile(latencies, 50)) if latencies else None,
        "latency_p95_s": float(np.percentile(latencies, 95)) if latencies else None,
    }


#: episode index fields carried into the report's per-episode entries
_META_KEYS = ("episode_id", "seed", "init_state_id", "length")


def _frame_indices(length: int, max_frames: int) -> list[int]:
    """Evenly spaced step indices over 0..length (first and last kept), at most max_frames."""
    n = length + 1
    if n <= max_frames:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max_frames)})


def score_episode(
    client: Any, episode: RecordedEpisode, max_frames: int, *, ask_done: bool = False
) -> EpisodeScore:
    """Score one recorded episode with a
    :class:`~evolve_envs.reward.clients.progress_client.ProgressClient`.

    With ``ask_done`` the service's ``/done`` is also asked about the last two scored frames
    (first frame as the reference), its verdict kept as ``backend_done``.
    """
    indices = _frame_indices(len(episode), max_frames)
    task = str(episode.meta.get("task") or "complete the task")
    try:
        frames = list(episode.frames(indices))
    except Exception as exc:  # a missing or damaged file costs that episode, not the report
        return EpisodeScore(
            task=task, success=bool(episode.meta.get("success", False)), values=[], critics=[],
            indices=indices, latency_s=0.0, ok=False,
            error=f"cannot read {episode.meta.get('file')}: {type(exc).__name__}: {exc}",
            meta={k: episode.meta.get(k) for k in _META_KEYS},
        )  # fmt: skip
    result = client.trajectory_values(task, frames, skip=1)
    tv = result.value
    ok = bool(result.ok and tv is not None)
    backend_done = None
    if ask_done and len(frames) >= 2:
        verdict = client.done(task, frames[0], frames[-2], frames[-1])
        backend_done = bool(verdict.value.done) if verdict.ok else None
    return EpisodeScore(
        task=task,
        success=bool(episode.meta.get("success", False)),
        values=[float(v) for v in tv.value_list] if ok else [],
        critics=[float(c) for c in tv.critic_list] if ok else [],
        indices=indices,
        latency_s=float(result.latency_s),
        ok=ok,
        error=result.error,
        meta={k: episode.meta.get(k) for k in _META_KEYS},
        backend_done=backend_done,
    )


def recorded_score(episode: RecordedEpisode) -> EpisodeScore:
    """The episode as the reward model judged it during the run: its recorded check values."""
    task = str(episode.meta.get("task") or "complete the task")
    meta = {k: episode.meta.get(k) for k in _META_KEYS}
    success = bool(episode.meta.get("success", False))
    try:
        steps, progress = episode.column("step"), episode.column("model_progress")
    except Exception as exc:
        return EpisodeScore(task, success, [], [], [], None, False,
                            f"cannot read {episode.meta.get('file')}: {exc}", meta)  # fmt: skip
    checks = [(k, p) for k, p in zip(steps, progress, strict=True) if p is not None]
    if not checks:
        return EpisodeScore(task, success, [], [], [], None, False,
                            "no reward-model checks were recorded", meta)  # fmt: skip
    return EpisodeScore(
        task, success, [float(p) for _, p in checks], [], [int(k) for k, _ in checks], None,
        True, None, meta,
    )  # fmt: skip


def check_services(services: Sequence[str], *, token: str | None = None) -> None:
    """Fail fast on a service list: every spec well formed, every URL service answering.

    Raises ``ValueError`` for a malformed spec and
    :class:`~evolve_envs.reward.clients.service_check.ServiceUnavailableError` for a URL that is
    unreachable, refuses the token or is not a reward service (``mock:`` services start later,
    here).
    """
    from evolve_envs.reward.clients.endpoint_pool import EndpointPool
    from evolve_envs.reward.clients.service_check import check_service

    if not services:
        raise ValueError("give at least one service (a URL, mock:<rule> or recorded)")
    for spec in services:
        if spec == "recorded" or spec.startswith("mock:"):
            continue
        if not spec.startswith(("http://", "https://")):
            raise ValueError(
                f"service {spec!r}: expected a URL, mock:<rule> (e.g. mock:reach_place) or recorded"
            )
        pool = EndpointPool([spec], token=token or os.environ.get("EVOLVE_REWARD_TOKEN"))
        try:
            check_service(pool, what=f"calibration service {spec}")
        finally:
            pool.close()


@contextlib.contextmanager
def _service_url(spec: str) -> Iterator[str]:
    """A URL for a service spec: a URL as is, or ``mock:<rule>`` started here."""
    if spec.startswith(("http://", "https://")):
        yield spec
        return
    backend, _, rule = spec.partition(":")
    if backend != "mock":
        raise ValueError(f"service {spec!r}: expected a URL or mock:<rule> (e.g. mock:reach_place)")
    from evolve_envs.reward.service.embedded import EmbeddedService

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

    A recording is a folder, or ``shipped`` / ``shipped:<name>`` for the package's own
    (:mod:`evolve_envs.recording.shipped`).

    ``threshold`` is in percent (0..100), like the values.
    """
    from evolve_envs.reward.clients.endpoint_pool import EndpointPool
    from evolve_envs.reward.clients.progress_client import ProgressClient

    if not 0 <= threshold <= 100:
        raise ValueError(f"threshold is in percent (0..100), got {threshold}")
    check_services(services, token=token)
    episodes = [ep for root in recordings for ep in open_recording(resolve_recording(root))]
    if not episodes:
        raise ValueError(f"no recorded episodes in {', '.join(map(str, recordings))}")
    report: dict[str, Any] = {
        "recordings": [str(r) for r in recordings],
        "episodes": len(episodes),
        "threshold": threshold,
        "max_frames": max_frames,
        "services": {},
    }
    per_service_scores: dict[str, list[EpisodeScore]] = {}
    for spec in services:
        if spec == "recorded":
            per_service_scores[spec] = scores = [recorded_score(ep) for ep in episodes]
            report["services"][spec] = _service_report(scores, threshold)
            continue
        with _service_url(spec) as url:
            pool = EndpointPool([url], token=token or os.environ.get("EVOLVE_REWARD_TOKEN"))
            client = ProgressClient(pool, max_workers=1)
            try:
                caps = client.capabilities().value
                ask_done = bool(caps is not None and caps.done)
                scores = [
                    score_episode(client, ep, max_frames, ask_done=ask_done) for ep in episodes
                ]
            finally:
                client.close()
                pool.close()
        per_service_scores[spec] = scores
        report["services"][spec] = _service_report(scores, threshold)
    report["_scores"] = per_service_scores
    return report


def _service_report(scores: list[EpisodeScore], threshold: float) -> dict[str, Any]:
    """One service's part of the report: overall, per task, and each episode's values."""
    tasks = sorted({s.task for s in scores})
    return {
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
                "backend_done": s.backend_done,
            }
            for s in scores
        ],
    }


def _clamped(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def summary_line(name: str, m: dict[str, Any], threshold: float) -> str:
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


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{0.0 if abs(value) < 5e-4 else value:.3f}"  # no "-0.000"
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
    if any(svc["overall"]["successes"] for svc in report["services"].values()):
        lines += _ranking(report)
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


def _ranking(report: dict[str, Any]) -> list[str]:
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


def _plots(report: dict[str, Any], out: Path, prefix: str = "") -> list[str]:
    """Draw the PNGs into ``out`` (names start with ``prefix``); returns their file names.

    The precision-recall curve needs a successful episode (recall is undefined without one) and
    is left out when no service has one.
    """
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


def _pr_plot(report: dict[str, Any], png: Path, plt: Any) -> str:
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


def _progress_plot(report: dict[str, Any], png: Path, plt: Any) -> str:
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


def _per_task_plot(report: dict[str, Any], tasks: list[str], png: Path, plt: Any) -> str:
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
    axes[1].set_xticklabels([t if len(t) <= 28 else t[:26] + "…" for t in tasks],
                            rotation=20, ha="right", fontsize=7)  # fmt: skip
    axes[0].legend(fontsize=7)
    axes[0].set_title("Per task")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png.name


def write_report(report: dict[str, Any], out: str | os.PathLike[str], *, prefix: str = "") -> Path:
    """Write ``report.json``, ``report.md`` and the PNGs into ``out``; returns the folder.

    Every file name starts with ``prefix`` (``prefix="cal_"``: ``cal_report.md`` links
    ``cal_progress_curves.png``), so several reports can share one folder and keep their links.
    """
    if "/" in prefix or os.sep in prefix:
        raise ValueError(f"prefix is part of a file name, not a path: {prefix!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain = {k: v for k, v in report.items() if not k.startswith("_")}
    plots = _plots(plain, out, prefix)
    (out / f"{prefix}report.json").write_text(json.dumps(_clean(plain), indent=2, default=str))
    (out / f"{prefix}report.md").write_text(_markdown(plain, plots))
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
