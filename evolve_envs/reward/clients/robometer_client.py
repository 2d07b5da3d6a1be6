"""RobometerClient: this package's client to a server that speaks Robometer's evaluation routes.

Robometer's evaluation server (and this service, which answers the same routes) takes a batch of
*progress samples* and answers a per-frame progress curve and per-frame success probabilities.
The client sends one sample per trajectory:

* ``encoding="npy"`` (default): ``POST /evaluate_batch_npy``, ``multipart/form-data``; the form
  field ``sample_<i>`` holds sample i as JSON, its frames replaced by
  ``{"__numpy_file__": "sample_<i>_trajectory_frames"}`` and sent as that ``.npy`` file part
  (uint8, T x H x W x 3, written without pickle);
* ``encoding="json"``: ``POST /evaluate_batch`` with ``{"samples": [...]}``, frames as nested
  lists.

A sample is ``{"sample_type": "progress", "trajectory": {"task": ..., "frames": ...,
"frames_shape": [T, H, W, 3]}}``. A trajectory longer than ``max_frames`` is sent as
``max_frames`` evenly spaced frames (first and last kept); :class:`RobometerCurve` says which.

The answer must hold ``outputs_progress.progress_pred``: one list per sample with one finite
value in [0, 1] per frame sent; ``outputs_success.success_probs`` is read the same way when the
server gives it (absent or null: ``success`` is ``None``). Anything else (not JSON, a missing
field, a wrong count, NaN, a value out of range) is a
:class:`~evolve_envs.reward.clients.errors.BadResponseError`, counted in ``stats`` by kind
``invalid_response``, and never turned into a score: in fail-soft mode the call's value is
``None``.

Example: a stand-in server (``httpx.MockTransport``) that reads every trajectory as rising
progress:

    >>> import httpx, json
    >>> def server(request):
    ...     assert request.url.path == "/evaluate_batch"
    ...     samples = json.loads(request.content)["samples"]
    ...     curves = [[t / 2 for t in range(len(s["trajectory"]["frames"]))] for s in samples]
    ...     return httpx.Response(200, json={"outputs_progress": {"progress_pred": curves},
    ...                                      "outputs_success": {"success_probs": curves}})
    >>> pool = EndpointPool("http://127.0.0.1:8001", transport=httpx.MockTransport(server))
    >>> client = RobometerClient(pool, encoding="json", close_pool=True)
    >>> frames = np.zeros((3, 8, 8, 3), np.uint8)
    >>> curve = client.progress("open the drawer", frames).value
    >>> curve.progress, curve.success, curve.indices
    ((0.0, 0.5, 1.0), (0.0, 0.5, 1.0), (0, 1, 2))
    >>> client.close()
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import numpy as np

from evolve_envs.reward.clients.client_base import ClientBase, check_finite, invalid_response
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.frame_encoding import validate_frame
from evolve_envs.reward.clients.pool_call import PoolResponse
from evolve_envs.reward.clients.results import CallResult, ClientStats

__all__ = ["RobometerClient", "RobometerCurve", "ROUTES", "even_indices", "parse_answer"]

#: The route of each encoding.
ROUTES = {"npy": "/evaluate_batch_npy", "json": "/evaluate_batch"}

#: ``(task, frames)``: frames a T x H x W x 3 uint8 array or a sequence of H x W x 3 frames.
Trajectory = tuple[str, np.ndarray | Sequence[np.ndarray]]


@dataclass(frozen=True, slots=True)
class RobometerCurve:
    """One trajectory as the server judged it.

    Attributes:
        progress: progress in [0, 1] of each frame sent.
        success: success probability in [0, 1] of each frame sent (``None``: not given).
        indices: which frames of the trajectory were sent (all of them up to ``max_frames``).

    Example:
        >>> RobometerCurve((0.0, 0.7), None, (0, 9)).final_progress
        0.7
    """

    progress: tuple[float, ...]
    success: tuple[float, ...] | None
    indices: tuple[int, ...]

    @property
    def final_progress(self) -> float:
        """Progress at the last frame sent."""
        return self.progress[-1]


def even_indices(count: int, max_frames: int) -> list[int]:
    """At most ``max_frames`` evenly spaced indices of ``range(count)``, first and last kept.

    >>> even_indices(10, 4), even_indices(3, 8)
    ([0, 3, 6, 9], [0, 1, 2])
    """
    if count <= max_frames:
        return list(range(count))
    return sorted({int(round(i)) for i in np.linspace(0, count - 1, max_frames)})


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


class RobometerClient(ClientBase):
    """Client of a Robometer evaluation server (see module docs).

    Args:
        pool_or_url: an :class:`EndpointPool` (its ``transport=`` is where tests inject one) or
            URL(s) (then the client opens its own pool).
        encoding: ``"npy"`` (multipart with ``.npy`` frames, Robometer's fast path) or
            ``"json"``.
        max_frames: most frames sent per trajectory (evenly spaced, first and last kept).
        fail_on_request_error: raise :class:`RewardServiceError` instead of answering ``None``.
        max_workers, timeout, stats, warn_interval_s, close_pool: as for the other clients.

    Example: a server that is down gives no curve (``None``), never a score of 0.

        >>> client = RobometerClient("http://127.0.0.1:9", warn_interval_s=3600)  # refuses
        >>> result = client.progress("t", np.zeros((2, 8, 8, 3), np.uint8))
        >>> result.value, result.fallback
        (None, True)
        >>> client.close()
    """

    def __init__(
        self,
        pool_or_url: EndpointPool | str | Sequence[str],
        *,
        encoding: str = "npy",
        max_frames: int = 32,
        fail_on_request_error: bool = False,
        max_workers: int = 4,
        timeout: float | None = None,
        stats: ClientStats | None = None,
        warn_interval_s: float = 60.0,
        close_pool: bool = False,
    ) -> None:
        if encoding not in ROUTES:
            raise ValueError(f"encoding must be one of {sorted(ROUTES)}, got {encoding!r}")
        if max_frames < 2:
            raise ValueError(f"max_frames must be >= 2, got {max_frames}")
        super().__init__(
            pool_or_url,
            fail_on_request_error=fail_on_request_error,
            max_workers=max_workers,
            timeout=timeout,
            stats=stats,
            warn_interval_s=warn_interval_s,
            close_pool=close_pool,
            name="robometer client",
        )
        self.encoding = encoding
        self.route = ROUTES[encoding]
        self.max_frames = int(max_frames)

    # ------------------------------------------------------------------ requests

    def _prepare(self, trajectories: Sequence[Trajectory]) -> list[tuple[str, np.ndarray, list]]:
        """``(task, T x H x W x 3 frames sent, their indices)`` per trajectory, checked."""
        if not trajectories:
            raise ValueError("evaluate needs at least one trajectory")
        out = []
        for n, (task, frames) in enumerate(trajectories):
            if not isinstance(task, str) or not task.strip():
                raise ValueError(f"trajectory {n}: the task must be a non-empty string")
            frames = list(frames)
            if not frames:
                raise ValueError(f"trajectory {n}: no frames")
            indices = even_indices(len(frames), self.max_frames)
            picked = []
            for k in indices:
                frame = validate_frame(frames[k], f"trajectory {n} frame {k}")
                if frame.ndim == 2:
                    frame = frame[..., None]
                if frame.shape[2] == 1:
                    frame = np.repeat(frame, 3, axis=2)
                picked.append(frame)
            shapes = {f.shape for f in picked}
            if len(shapes) > 1:
                raise ValueError(f"trajectory {n}: frames differ in shape: {sorted(shapes)}")
            out.append((task, np.stack(picked), indices))
        return out

    def _body(self, prepared: list[tuple[str, np.ndarray, list]]) -> tuple[bytes, dict[str, str]]:
        """The request body and its headers, in this client's encoding."""
        samples = []
        files: dict[str, tuple[str, bytes, str]] = {}
        for i, (task, frames, _) in enumerate(prepared):
            if self.encoding == "npy":
                key = f"sample_{i}_trajectory_frames"
                files[key] = (f"{key}.npy", _npy(frames), "application/octet-stream")
                sent: dict[str, str] | list[object] = {"__numpy_file__": key}
            else:
                sent = frames.tolist()
            trajectory = {"task": task, "frames": sent, "frames_shape": list(frames.shape)}
            samples.append({"sample_type": "progress", "trajectory": trajectory})
        if self.encoding == "json":
            return json.dumps({"samples": samples}).encode(), {"Content-Type": "application/json"}
        data = {f"sample_{i}": json.dumps(s) for i, s in enumerate(samples)}
        request = httpx.Request("POST", "http://robometer", data=data, files=files)
        return request.read(), {"Content-Type": request.headers["Content-Type"]}

    def evaluate(
        self, trajectories: Sequence[Trajectory]
    ) -> CallResult[list[RobometerCurve] | None]:
        """One request for every ``(task, frames)`` trajectory; a curve each, in order.

        Fallback (the call failed or the answer is malformed, in fail-soft mode): ``None``.
        """
        prepared = self._prepare(trajectories)
        route = self.route

        def call() -> tuple[list[RobometerCurve], str, int]:
            body, headers = self._body(prepared)
            reply = self._request("POST", route, content=body, headers=headers)
            curves = parse_answer(reply, route, [len(f) for _, f, _ in prepared])
            out = [
                RobometerCurve(tuple(p), None if s is None else tuple(s), tuple(idx))
                for (p, s), (_, _, idx) in zip(curves, prepared, strict=True)
            ]
            return out, reply.endpoint, reply.attempts

        return self._run(route, call, None)

    def progress(
        self, task: str, frames: np.ndarray | Sequence[np.ndarray]
    ) -> CallResult[RobometerCurve | None]:
        """The curve of one trajectory (see :meth:`evaluate`)."""
        result = self.evaluate([(task, frames)])
        value = result.value[0] if result.value is not None else None
        return CallResult(
            value=value,
            ok=result.ok,
            fallback=result.fallback,
            latency_s=result.latency_s,
            endpoint=result.endpoint,
            error=result.error,
            attempts=result.attempts,
        )


def _curve_lists(
    reply: PoolResponse, route: str, body: dict, outer: str, inner: str, counts: list[int]
) -> list[list[float]] | None:
    """``body[outer][inner]`` as one checked list of values in [0, 1] per sample."""
    block = body.get(outer)
    if block is None and outer == "outputs_success":
        return None
    if not isinstance(block, dict) or (inner not in block and outer == "outputs_progress"):
        raise invalid_response(reply, route, f"no {outer}.{inner} in the answer")
    curves = block.get(inner)
    if curves is None and outer == "outputs_success":
        return None
    name = f"{outer}.{inner}"
    if not isinstance(curves, list) or len(curves) != len(counts):
        got = f"{len(curves)} lists" if isinstance(curves, list) else type(curves).__name__
        raise invalid_response(reply, route, f"{name}: expected {len(counts)} lists, got {got}")
    out = []
    for i, (curve, count) in enumerate(zip(curves, counts, strict=True)):
        if not isinstance(curve, list) or len(curve) != count:
            got = f"{len(curve)} values" if isinstance(curve, list) else type(curve).__name__
            msg = f"{name}[{i}]: expected {count} values (one per frame sent), got {got}"
            raise invalid_response(reply, route, msg)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in curve):
            raise invalid_response(reply, route, f"{name}[{i}] holds a value that is not a number")
        out.append(check_finite(reply, route, f"{name}[{i}]", curve, 0.0, 1.0))
    return out


def parse_answer(
    reply: PoolResponse, route: str, counts: list[int]
) -> list[tuple[list[float], list[float] | None]]:
    """``(progress, success or None)`` per sample of a Robometer answer, or a
    :class:`~evolve_envs.reward.clients.errors.BadResponseError` naming what is wrong."""
    try:
        body = json.loads(reply.response.content)
    except (ValueError, UnicodeDecodeError) as exc:
        snippet = reply.response.content[:80]
        raise invalid_response(reply, route, f"body is not JSON ({exc}): {snippet!r}") from None
    if not isinstance(body, dict):
        raise invalid_response(reply, route, f"expected a JSON object, got {type(body).__name__}")
    progress = _curve_lists(reply, route, body, "outputs_progress", "progress_pred", counts)
    success = _curve_lists(reply, route, body, "outputs_success", "success_probs", counts)
    assert progress is not None
    return [(p, None if success is None else success[i]) for i, p in enumerate(progress)]
