"""``evolve-envs calibrate``: how right is a reward model on recorded episodes?

Each episode's frames (at most ``max_frames``, evenly spaced, first and last kept) go to a
service's ``/trajectory-critic`` in one call, and the values are judged against the env's
success flag (:mod:`evolve_envs.cli.reports.calibration_metrics`; the metrics and the kinds of
service are described in docs/trust.md); :mod:`evolve_envs.cli.reports.calibrate` writes the
report.

Example::

    report = calibrate(["shipped"], ["mock:reach_place", "mock:random"], max_frames=16)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.cli.reports.calibration_metrics import EpisodeScore, service_metrics
from evolve_envs.recording.episodes import RecordedEpisode, open_recording
from evolve_envs.recording.shipped import resolve_recording

if TYPE_CHECKING:
    from pydantic import JsonValue

    from evolve_envs.reward.clients.progress_client import ProgressClient

__all__ = ["calibrate", "check_services", "open_episodes", "service_url"]


#: episode index fields carried into the report's per-episode entries
_META_KEYS = ("episode_id", "seed", "init_state_id", "length")


def _frame_indices(length: int, max_frames: int) -> list[int]:
    """Evenly spaced step indices over 0..length (first and last kept), at most max_frames."""
    n = length + 1
    if n <= max_frames:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max_frames)})


def score_episode(
    client: ProgressClient,
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
            task=task,
            success=bool(episode.meta.get("success", False)),
            values=[],
            critics=[],
            indices=indices,
            latency_s=0.0,
            ok=False,
            error=f"cannot read {episode.meta.get('file')}: {type(exc).__name__}: {exc}",
            meta={k: episode.meta.get(k) for k in _META_KEYS},
        )
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
        return EpisodeScore(
            task,
            success,
            [],
            [],
            [],
            None,
            False,
            f"cannot read {episode.meta.get('file')}: {exc}",
            meta,
        )
    checks = [(k, p) for k, p in zip(steps, progress, strict=True) if p is not None]
    if not checks:
        return EpisodeScore(
            task, success, [], [], [], None, False, "no reward-model checks were recorded", meta
        )
    return EpisodeScore(
        task,
        success,
        [float(p) for _, p in checks],
        [],
        [int(k) for k, _ in checks],
        None,
        True,
        None,
        meta,
    )


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
) -> list[RecordedEpisode]:
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
        with EmbeddedService(
            "fitted", {"ckpt_path": os.path.abspath(spec)}, startup_timeout=120
        ) as svc:
            yield svc.url
        return
    backend, _, rule = spec.partition(":")
    if backend != "mock":
        raise ValueError(
            f"service {spec!r}: expected a URL, mock:<rule> (e.g. mock:reach_place) "
            "or a model directory"
        )
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
) -> dict[str, JsonValue]:
    """Score every recorded episode with every service; the report as a dict (docs/trust.md).

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
    report: dict[str, JsonValue] = {
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
                episodes
                if label is None
                else open_episodes(recordings, camera=camera, orientation=orientation, label=label)
            )
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


def _service_report(scores: list[EpisodeScore], threshold: float) -> dict[str, JsonValue]:
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
