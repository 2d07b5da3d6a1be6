"""RobometerRemoteBackend: a Robometer evaluation server as this service's reward model (one
request of progress samples per backend batch).

Example:
    >>> backend = RobometerRemoteBackend("http://127.0.0.1:8001")
    >>> caps = backend.capabilities()
    >>> caps.backend, caps.done, caps.video, caps.image_score
    ('robometer_remote', True, True, False)
    >>> backend.close()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import httpx

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import BadResponseError, RewardServiceError
from evolve_envs.reward.clients.robometer_client import RobometerClient, RobometerCurve
from evolve_envs.reward.protocol.critic_math import critic_between
from evolve_envs.reward.service.backends.base import (
    Backend,
    BackendError,
    CriticItem,
    DoneItem,
    MalformedAnswerError,
    VideoItem,
)

__all__ = ["RobometerRemoteBackend"]


class RobometerRemoteBackend(Backend):
    """Reward judgements from a Robometer evaluation server (see module docs).

    Args:
        base_url: the Robometer server, e.g. ``http://gpu-1:8001``.
        encoding: ``"npy"`` (``/evaluate_batch_npy``, default) or ``"json"``
            (``/evaluate_batch``).
        success_threshold: success probability at which the current frame is done.
        done_threshold: progress (0..1) at which it is done when the server gives no success
            probabilities.
        max_frames: most frames of an episode video sent (evenly spaced, first and last kept).
        timeout: seconds per request attempt.
        max_retries: retries per request (connection errors, 429, 5xx).
        model_id: the model the server runs, reported by ``/capabilities`` (default
            ``robometer@<base_url>``).
        transport: an httpx transport under the client (tests, embedders).
        disabled: optional capabilities to switch off.
    """

    name = "robometer_remote"

    def __init__(
        self,
        base_url: str,
        *,
        encoding: str = "npy",
        success_threshold: float = 0.5,
        done_threshold: float = 0.95,
        max_frames: int = 32,
        timeout: float = 60.0,
        max_retries: int = 2,
        model_id: str | None = None,
        transport: httpx.BaseTransport | None = None,
        disabled: Iterable[str] = (),
    ) -> None:
        super().__init__(disabled=disabled)
        for name, value in (
            ("success_threshold", success_threshold),
            ("done_threshold", done_threshold),
        ):
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{name} is a fraction in [0, 1], got {value}")
        self.base_url = base_url
        self.success_threshold = float(success_threshold)
        self.done_threshold = float(done_threshold)
        self.model_id = model_id or f"robometer@{base_url}"
        self.model_revision = None
        pool = EndpointPool(
            base_url, timeout=float(timeout), max_retries=int(max_retries), transport=transport
        )
        self.client = RobometerClient(
            pool,
            encoding=encoding,
            max_frames=max_frames,
            fail_on_request_error=True,
            max_workers=1,
            close_pool=True,
        )

    def _curves(self, what: str, trajectories: list[tuple[str, list]]) -> list[object]:
        """One curve per trajectory, or (a malformed answer) the error for every item."""
        if not trajectories:
            return []
        try:
            curves = self.client.evaluate(trajectories).value
        except BadResponseError as exc:
            expected = f"a Robometer {what} answer"
            return [MalformedAnswerError("robometer", exc.cause, expected) for _ in trajectories]
        except RewardServiceError as exc:
            raise BackendError(str(exc)) from exc
        assert curves is not None  # fail_on_request_error: a failure raised above
        return list(curves)

    def critic_batch(self, items: Sequence[CriticItem]) -> list[object]:
        """The change of progress from frame a to frame b, as a critic in [-100, 100]."""
        curves = self._curves(
            "progress", [(it.task, [it.first, it.image_a, it.image_b]) for it in items]
        )
        return [
            c
            if isinstance(c, Exception)
            else critic_between(100 * c.progress[1], 100 * c.progress[2])
            for c in curves
        ]

    def _done(self, curve: RobometerCurve) -> tuple[bool, float]:
        progress = curve.final_progress
        if curve.success is not None:
            return curve.success[-1] >= self.success_threshold, progress
        return progress >= self.done_threshold, progress

    def done_batch(self, items: Sequence[DoneItem]) -> list[object]:
        """`(done, progress of the current frame)` per item (see module docs)."""
        curves = self._curves("done", [(it.task, [it.first, it.prev, it.curr]) for it in items])
        return [c if isinstance(c, Exception) else self._done(c) for c in curves]

    def score_video(self, item: VideoItem) -> tuple[float, str | None]:
        """The progress of the last sampled frame; a malformed answer raises."""
        if not item.frames:
            raise BackendError("video has no frames")
        (curve,) = self._curves("video", [(item.task_text, list(item.frames))])
        if isinstance(curve, Exception):
            raise curve
        return curve.final_progress, None

    def close(self) -> None:
        self.client.close()
