"""``evolve-envs calibrate``: how right is a reward model on recorded episodes?

Re-scores recorded episodes (:mod:`evolve_envs.recording.episodes`; ``evolve-envs rollout --record
DIR``) with one or more reward services into a report per task and overall, which
:mod:`evolve_envs.cli.calibrate_report` writes (``report.json``, ``report.md``, PNGs). Each
episode's frames (at most ``max_frames``, evenly spaced, first and last kept) go to
``/trajectory-critic`` in one call; its ``value_list`` (progress in percent relative to the first
frame, VLAC's accumulation) is the model's judgement of the episode. Measured against the env's
success flag:

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

Services are URLs, ``mock:<rule>`` for a local mock service (e.g. ``mock:reach_place``), the
path of a model directory written by ``evolve-envs fit-reward`` (served here by the ``fitted``
backend), or
``recorded``: no service, the progress the reward model reported at its checks while the episodes
were recorded (``model_progress``), judged the same way (no critics, no latency);
``recorded:<label>`` reads the ``reward_model.<label>.*`` columns of a LeRobot dataset or a
recording (a model's judgement added by ``evolve-envs relabel``).

A recording is a folder written by ``rollout --record`` or a LeRobotDataset v3 folder
(:mod:`evolve_envs.recording.lerobot_read`): ``camera`` picks the camera scored, and
``orientation`` says how a LeRobot dataset's LIBERO frames are turned from MuJoCo's render when
the dataset does not (``rot180`` for ``lerobot/libero``). Episodes of a LeRobot dataset without
``next.success`` count as successful demonstrations (the report says how many).

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
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evolve_envs.recording.episodes import RecordedEpisode, open_recording
from evolve_envs.recording.shipped import resolve_recording

__all__ = [
    "EpisodeScore",
    "calibrate",
    "check_services",
    "open_episodes",
    "pr_metrics",
    "spearman",
    "service_metrics",
    "value_order_correlation",
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
    client: Any,
    episode: RecordedEpisode,
    max_frames: int,
    *,
    ask_done: bool = False,
    camera: str | None = None,
) -> EpisodeScore:
    """Score one recorded episode with a
    :class:`~evolve_envs.reward.clients.progress_client.ProgressClient`.

    With ``ask_done`` the service's ``/done`` is also asked about the last two scored frames
    (first frame as the reference), its verdict kept as ``backend_done``; ``camera`` picks a
    recorded camera other than the reward camera.
    """
    indices = _frame_indices(len(episode), max_frames)
    task = str(episode.meta.get("task") or "complete the task")
    try:
        frames = list(episode.frames(indices, camera=camera))
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
    """The episode as the reward model judged it during the run (or, for a LeRobot dataset,
    as its ``reward_model.<label>.*`` columns say): its recorded check values."""
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
        if spec.startswith("mock:"):
            from evolve_envs.reward.service.backends.mock import check_rule

            try:
                check_rule(spec.removeprefix("mock:") or "change")
            except ValueError as exc:
                raise ValueError(f"service {spec!r}: {exc}") from None
            continue
        if _is_recorded(spec) or _model_dir(spec):
            continue
        if not spec.startswith(("http://", "https://")):
            raise ValueError(
                f"service {spec!r}: expected a URL, mock:<rule> (e.g. mock:reach_place), a "
                "model directory (evolve-envs fit-reward) or recorded"
            )
        pool = EndpointPool([spec], token=token)
        try:
            check_service(pool, what=f"calibration service {spec}", option="--service")
        finally:
            pool.close()


def _is_recorded(spec: str) -> bool:
    return spec == "recorded" or spec.startswith("recorded:")


def _model_dir(spec: str) -> bool:
    """A fitted progress model's directory (``evolve-envs fit-reward``), served here."""
    from evolve_envs.reward.service.backends.progress_net import is_model_dir

    return not spec.startswith(("http://", "https://")) and is_model_dir(spec)


def open_episodes(
    recordings: Sequence[str | os.PathLike[str]],
    *,
    camera: str | None = None,
    orientation: str | None = None,
    label: str | None = None,
) -> list[Any]:
    """The episodes of recordings and LeRobot datasets, opened for scoring ``camera``
    (``orientation`` and ``label`` apply to LeRobot datasets)."""
    out = []
    for root in recordings:
        path = resolve_recording(root)
        lerobot = (path / "meta" / "info.json").is_file()
        options = {"camera": camera, "stored_orientation": orientation, "label": label}
        if lerobot:
            out.extend(open_recording(path, **{k: v for k, v in options.items() if v}))
            continue
        if orientation is not None:
            raise ValueError(f"--orientation applies to LeRobot datasets; {root} is a recording")
        episodes = list(open_recording(path, **({"label": label} if label else {})))
        if camera is not None and episodes and camera not in episodes[0].cameras:
            raise ValueError(
                f"{root} has no camera {camera!r} (cameras: {', '.join(episodes[0].cameras)})"
            )
        out.extend(episodes)
    return out


@contextlib.contextmanager
def service_url(spec: str) -> Iterator[str]:
    """A URL for a service spec: a URL as is, or ``mock:<rule>`` or a model directory (the
    ``fitted`` backend) started here (and stopped on leaving).

    >>> with service_url("http://127.0.0.1:8111") as url:
    ...     url
    'http://127.0.0.1:8111'
    """
    if spec.startswith(("http://", "https://")):
        yield spec
        return
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    if _model_dir(spec):
        with EmbeddedService("fitted", {"ckpt_path": os.path.abspath(spec)},
                             startup_timeout=120) as svc:  # fmt: skip
            yield svc.url
        return
    backend, _, rule = spec.partition(":")
    if backend != "mock":
        raise ValueError(f"service {spec!r}: expected a URL, mock:<rule> (e.g. mock:reach_place) "
                         "or a model directory")  # fmt: skip
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
    camera: str | None = None,
    orientation: str | None = None,
) -> dict[str, Any]:
    """Score every recorded episode with every service; the report as a dict (see module doc).

    A recording is a folder (ours or a LeRobotDataset v3), or ``shipped`` / ``shipped:<name>``
    for the package's own (:mod:`evolve_envs.recording.shipped`).

    ``threshold`` is in percent (0..100), like the values.
    """
    from evolve_envs.reward.clients.endpoint_pool import EndpointPool
    from evolve_envs.reward.clients.progress_client import ProgressClient

    if not 0 <= threshold <= 100:
        raise ValueError(f"threshold is in percent (0..100), got {threshold}")
    check_services(services, token=token)
    episodes = open_episodes(recordings, camera=camera, orientation=orientation)
    ours_camera = camera if not any(hasattr(ep, "dataset") for ep in episodes) else None
    if not episodes:
        raise ValueError(f"no recorded episodes in {', '.join(map(str, recordings))}")
    report: dict[str, Any] = {
        "recordings": [str(r) for r in recordings],
        "episodes": len(episodes),
        "threshold": threshold,
        "max_frames": max_frames,
        "assumed_successes": sum(1 for ep in episodes if ep.meta.get("success_known") is False),
        "services": {},
    }
    per_service_scores: dict[str, list[EpisodeScore]] = {}
    for spec in services:
        if _is_recorded(spec):
            label = spec.partition(":")[2] or None
            judged = (
                episodes if label is None
                else open_episodes(recordings, camera=camera, orientation=orientation, label=label)
            )  # fmt: skip
            per_service_scores[spec] = scores = [recorded_score(ep) for ep in judged]
            report["services"][spec] = _service_report(scores, threshold)
            continue
        with service_url(spec) as url:
            pool = EndpointPool([url], token=token)
            client = ProgressClient(pool, max_workers=1)
            try:
                caps = client.capabilities().value
                ask_done = bool(caps is not None and caps.done)
                scores = [
                    score_episode(client, ep, max_frames, ask_done=ask_done, camera=ours_camera)
                    for ep in episodes
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
