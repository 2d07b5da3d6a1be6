"""ProgressClient: the VLAC-compatible progress protocol (docs/PROTOCOLS.md §1).

Every call returns a :class:`~evolve_envs.reward.clients.results.CallResult`: the validated answer,
or on failure the fallback (``fallback_critic``, ``None``, not done) unless
``fail_on_request_error`` raises. ``submit_*`` copy the frames now and send from worker threads.

>>> import httpx
>>> from evolve_envs.reward.clients.endpoint_pool import EndpointPool
>>> answers = {"/pairwise-critic": {"critic": 12.5}, "/done": {"done": True, "prob": 0.9}}
>>> service = httpx.MockTransport(lambda r: httpx.Response(200, json=answers[r.url.path]))
>>> pool = EndpointPool("http://127.0.0.1:8111", timeout=120, transport=service)
>>> client = ProgressClient(pool, jpeg_quality=85, fallback_critic=0.0, close_pool=True)
>>> frame = np.zeros((32, 32, 3), np.uint8)
>>> r = client.pairwise_critic("open the drawer", frame, frame)
>>> r.value, r.ok, client.submit_done("open the drawer", frame, frame, frame).result().value.done
(12.5, True, True)
>>> client.close(); pool.closed                 # the client owned the pool
True
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from evolve_envs.reward.clients.client_base import (
    ClientBase,
    check_finite,
    invalid_response,
    parse_json_model,
)
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.frame_encoding import (
    DEFAULT_JPEG_QUALITY,
    encode_jpeg_b64,
    validate_frame,
)
from evolve_envs.reward.clients.results import CallResult, ClientStats
from evolve_envs.reward.protocol.wire import (
    Capabilities,
    DoneRequest,
    DoneResponse,
    PairwiseCriticRequest,
    PairwiseCriticResponse,
    TrajectoryCriticRequest,
    TrajectoryCriticResponse,
)

__all__ = ["ProgressClient", "TrajectoryValues", "DoneResult", "Capabilities"]

ROUTE_CAPABILITIES = "/capabilities"
ROUTE_PAIRWISE = "/pairwise-critic"
ROUTE_TRAJECTORY = "/trajectory-critic"
ROUTE_DONE = "/done"


@dataclass(frozen=True, slots=True)
class TrajectoryValues:
    """Answer of ``/trajectory-critic``.

    ``value_list[0] == 0``; ``value_list[k]`` is the progress of sampled frame ``k`` (frames
    ``0, skip, 2*skip, ...``); ``critic_list[k]`` compares sampled frames ``k`` and ``k+1``.
    ``indices`` are the positions of the sampled frames in the input.
    """

    value_list: list[float]
    critic_list: list[float]
    indices: list[int]


@dataclass(frozen=True, slots=True)
class DoneResult:
    """Answer of ``/done``; ``prob`` is ``None`` for the fallback."""

    done: bool
    prob: float | None


FALLBACK_DONE = DoneResult(done=False, prob=None)


def sampled_indices(num_frames: int, skip: int) -> list[int]:
    """Positions of the frames ``/trajectory-critic`` samples: ``0, skip, 2*skip, ...``."""
    return list(range(0, num_frames, skip))


def _copy_frames(frames: Sequence[np.ndarray], name: str) -> list[np.ndarray]:
    return [np.array(validate_frame(f, f"{name}[{i}]"), copy=True) for i, f in enumerate(frames)]


class ProgressClient(ClientBase):
    """Client of a progress reward service (VLAC protocol).

    ``pool``: an open pool, or URL(s) for a pool of its own; ``close_pool``: close ``pool`` with the
    client; ``fallback_critic``: the pairwise critic of a failed call (0: no change); ``timeout``:
    per-attempt override of the pool's; ``stats``: shared counters (default a new ``ClientStats``).
    """

    def __init__(
        self,
        pool: EndpointPool | str | Sequence[str],
        *,
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
        fail_on_request_error: bool = False,
        fallback_critic: float = 0.0,
        max_workers: int = 8,
        timeout: float | None = None,
        stats: ClientStats | None = None,
        warn_interval_s: float = 60.0,
        close_pool: bool = False,
    ) -> None:
        super().__init__(
            pool,
            fail_on_request_error=fail_on_request_error,
            max_workers=max_workers,
            timeout=timeout,
            stats=stats,
            warn_interval_s=warn_interval_s,
            close_pool=close_pool,
            name="progress client",
        )
        if not 1 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality must be in [1, 100], got {jpeg_quality}")
        self.jpeg_quality = int(jpeg_quality)
        self.fallback_critic = float(fallback_critic)

    def _b64(self, frame: np.ndarray) -> str:
        return encode_jpeg_b64(frame, self.jpeg_quality)

    # ------------------------------------------------------------------ capabilities

    def capabilities(self) -> CallResult[Capabilities | None]:
        """``GET /capabilities`` -> :class:`Capabilities` (``backend``, ``progress``,
        ``pairwise``, ``done``, ...); fallback ``None``."""

        def call():
            reply = self._request("GET", ROUTE_CAPABILITIES)
            return (
                parse_json_model(reply, ROUTE_CAPABILITIES, Capabilities),
                reply.endpoint,
                (reply.attempts),
            )

        return self._run(ROUTE_CAPABILITIES, call, None)

    # ------------------------------------------------------------------ pairwise

    def pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> CallResult[float]:
        """Critic in [-100, 100]: how much closer ``image_b`` is to completing ``task`` than
        ``image_a``. Fallback: ``fallback_critic``."""
        _check_task(task)
        a = validate_frame(image_a, "image_a")
        b = validate_frame(image_b, "image_b")
        return self._pairwise(task, a, b)

    def submit_pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> Future[CallResult[float]]:
        """Non-blocking :meth:`pairwise_critic` (frames copied now, encoded in a worker)."""
        _check_task(task)
        a, b = _copy_frames([image_a, image_b], "images")
        return self._submit(self._pairwise, task, a, b)

    def _pairwise(self, task: str, a: np.ndarray, b: np.ndarray) -> CallResult[float]:
        def call():
            body = PairwiseCriticRequest(task=task, image_a=self._b64(a), image_b=self._b64(b))
            reply = self._request("POST", ROUTE_PAIRWISE, json=body.model_dump(exclude_none=True))
            parsed = parse_json_model(reply, ROUTE_PAIRWISE, PairwiseCriticResponse)
            (critic,) = check_finite(reply, ROUTE_PAIRWISE, "critic", [parsed.critic], -100, 100)
            return critic, reply.endpoint, reply.attempts

        return self._run(ROUTE_PAIRWISE, call, self.fallback_critic)

    # ------------------------------------------------------------------ trajectory

    def trajectory_values(
        self,
        task: str,
        frames: Sequence[np.ndarray],
        *,
        skip: int = 5,
        batch_size: int = 8,
        reference: Sequence[np.ndarray] | None = None,
        ref_num: int | None = None,
        task_name: str | None = None,
        use_server_reference: bool | None = None,
    ) -> CallResult[TrajectoryValues | None]:
        """``POST /trajectory-critic``: progress of ``frames[::skip]`` relative to ``frames[0]``.

        ``skip`` defaults to 5 like VLAC; pass ``skip=1`` for every frame. The answer must have
        ``len(range(skip, len(frames), skip))`` critics and one more value. Fallback: ``None``.
        """
        _check_task(task)
        frame_list = [validate_frame(f, f"frames[{i}]") for i, f in enumerate(frames)]
        refs = None
        if reference is not None:
            refs = [validate_frame(f, f"reference[{i}]") for i, f in enumerate(reference)]
        _check_trajectory_args(frame_list, skip, batch_size)
        options = (skip, batch_size, ref_num, task_name, use_server_reference)
        return self._trajectory(task, frame_list, refs, options)

    def submit_trajectory_values(
        self,
        task: str,
        frames: Sequence[np.ndarray],
        *,
        skip: int = 5,
        batch_size: int = 8,
        reference: Sequence[np.ndarray] | None = None,
        ref_num: int | None = None,
        task_name: str | None = None,
        use_server_reference: bool | None = None,
    ) -> Future[CallResult[TrajectoryValues | None]]:
        """Non-blocking :meth:`trajectory_values` (frames copied now, encoded in a worker)."""
        _check_task(task)
        frame_list = _copy_frames(list(frames), "frames")
        refs = None if reference is None else _copy_frames(list(reference), "reference")
        _check_trajectory_args(frame_list, skip, batch_size)
        options = (skip, batch_size, ref_num, task_name, use_server_reference)
        return self._submit(self._trajectory, task, frame_list, refs, options)

    def _trajectory(self, task, frames, refs, options) -> CallResult[TrajectoryValues | None]:
        skip, batch_size, ref_num, task_name, use_server_reference = options
        indices = sampled_indices(len(frames), skip)

        def call():
            body = TrajectoryCriticRequest(
                task=task,
                frames=[self._b64(f) for f in frames],
                reference=None if refs is None else [self._b64(f) for f in refs],
                skip=skip,
                ref_num=ref_num,
                batch_size=batch_size,
                task_name=task_name,
                use_server_reference=use_server_reference,
            )
            reply = self._request("POST", ROUTE_TRAJECTORY, json=body.model_dump(exclude_none=True))
            parsed = parse_json_model(reply, ROUTE_TRAJECTORY, TrajectoryCriticResponse)
            if len(parsed.value_list) != len(indices):
                raise invalid_response(
                    reply,
                    ROUTE_TRAJECTORY,
                    f"expected {len(indices)} values for {len(frames)} frames at skip={skip}, "
                    f"got {len(parsed.value_list)}",
                )
            critics = check_finite(
                reply, ROUTE_TRAJECTORY, "critic_list", parsed.critic_list, -100, 100
            )
            values = check_finite(
                reply, ROUTE_TRAJECTORY, "value_list", parsed.value_list, high=100
            )
            result = TrajectoryValues(value_list=values, critic_list=critics, indices=indices)
            return result, reply.endpoint, reply.attempts

        return self._run(ROUTE_TRAJECTORY, call, None)

    # ------------------------------------------------------------------ done

    def done(
        self,
        task: str,
        first_frame: np.ndarray,
        prev_frame: np.ndarray,
        curr_frame: np.ndarray,
        *,
        reference: Sequence[np.ndarray] | None = None,
    ) -> CallResult[DoneResult]:
        """``POST /done``: is ``task`` complete in ``curr_frame``? Fallback:
        ``DoneResult(done=False, prob=None)`` (a failing service never ends an episode)."""
        _check_task(task)
        frames = [
            validate_frame(first_frame, "first_frame"),
            validate_frame(prev_frame, "prev_frame"),
            validate_frame(curr_frame, "curr_frame"),
        ]
        refs = None
        if reference is not None:
            refs = [validate_frame(f, f"reference[{i}]") for i, f in enumerate(reference)]
        return self._done(task, frames, refs)

    def submit_done(
        self,
        task: str,
        first_frame: np.ndarray,
        prev_frame: np.ndarray,
        curr_frame: np.ndarray,
        *,
        reference: Sequence[np.ndarray] | None = None,
    ) -> Future[CallResult[DoneResult]]:
        """Non-blocking :meth:`done` (frames copied now, encoded in a worker)."""
        _check_task(task)
        frames = _copy_frames([first_frame, prev_frame, curr_frame], "frames")
        refs = None if reference is None else _copy_frames(list(reference), "reference")
        return self._submit(self._done, task, frames, refs)

    def _done(self, task, frames, refs) -> CallResult[DoneResult]:
        def call():
            first, prev, curr = frames
            body = DoneRequest(
                task=task,
                first_frame=self._b64(first),
                prev_frame=self._b64(prev),
                curr_frame=self._b64(curr),
                reference=None if refs is None else [self._b64(f) for f in refs],
            )
            reply = self._request("POST", ROUTE_DONE, json=body.model_dump(exclude_none=True))
            parsed = parse_json_model(reply, ROUTE_DONE, DoneResponse)
            (prob,) = check_finite(reply, ROUTE_DONE, "prob", [parsed.prob], 0.0, 1.0)
            return DoneResult(done=parsed.done, prob=prob), reply.endpoint, reply.attempts

        return self._run(ROUTE_DONE, call, FALLBACK_DONE)


def _check_task(task: str) -> None:
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"task must be a non-empty string, got {task!r}")


def _check_trajectory_args(frames: list[np.ndarray], skip: int, batch_size: int) -> None:
    if len(frames) < 1:
        raise ValueError("trajectory_values needs at least one frame")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 1:
        raise ValueError(f"skip must be an int >= 1, got {skip!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
