"""VideoScoreClient: the episode video score protocol (RLinf-RLAIF; docs/PROTOCOLS.md §2).

``score(task_text, frames)`` samples ``nframes`` frames, writes them as an MP4 and sends
``POST /score``, inline (base64), by path in a ``shared_dir`` the server mounts, or ``auto``
(inline until a server asks for ``video_path``). Temporary files are always removed; a failed
call gives ``fallback_score`` unless ``fail_on_request_error`` raises.

>>> import httpx
>>> from evolve_envs.reward.clients.endpoint_pool import EndpointPool
>>> service = httpx.MockTransport(lambda r: httpx.Response(200, json={"score": 0.8}))
>>> pool = EndpointPool("http://127.0.0.1:8111", transport=service)
>>> client = VideoScoreClient(pool, nframes=4, video_fps=4, close_pool=True)
>>> client.score("put the bowl on the plate", [np.zeros((16, 16, 3), np.uint8)] * 6).value
0.8
>>> client.close()
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

import numpy as np

from evolve_envs.reward.clients.client_base import ClientBase, check_finite, parse_json_model
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.frame_encoding import b64encode_bytes, validate_frame
from evolve_envs.reward.clients.results import SCORE_RANGE, CallResult, ClientStats
from evolve_envs.reward.protocol.wire import ScoreRequest, ScoreResponse, sample_indices

__all__ = ["VideoScoreClient", "sample_indices", "write_mp4", "MAX_NFRAMES"]

ROUTE_SCORE = "/score"
MAX_NFRAMES = 128


def _even(frame: np.ndarray) -> np.ndarray:
    """Pad odd heights/widths by one edge row/column: H.264 in yuv420p needs even sizes."""
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    elif frame.shape[2] == 1:
        frame = np.repeat(frame, 3, axis=2)
    pad_h, pad_w = frame.shape[0] % 2, frame.shape[1] % 2
    if pad_h or pad_w:
        frame = np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    return frame


def write_mp4(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: float) -> None:
    """Write uint8 frames as an H.264 MP4 at ``fps`` (odd sizes padded to even)."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the MP4 writer imageio uses)
    except ImportError as e:
        raise ImportError(
            "episode videos are encoded with imageio and imageio-ffmpeg: "
            "pip install 'evolve-envs[video]'"
        ) from e

    writer = imageio.get_writer(
        os.fspath(path),
        format="FFMPEG",
        mode="I",
        fps=fps,
        codec="libx264",
        macro_block_size=1,
        ffmpeg_log_level="error",
    )
    try:
        for frame in frames:
            writer.append_data(_even(frame))
    finally:
        writer.close()


class VideoScoreClient(ClientBase):
    """Client of an episode video score service.

    ``mode``: ``"inline"``, ``"path"`` (needs ``shared_dir``) or ``"auto"``; ``max_pixels``,
    ``backend`` and ``backend_kwargs`` are passed to the server; ``max_nframes`` caps ``nframes``
    (128); ``temp_dir`` holds inline mode's temporary MP4. The other arguments are
    :class:`~evolve_envs.reward.clients.progress_client.ProgressClient`'s.
    """

    def __init__(
        self,
        pool: EndpointPool | str | Sequence[str],
        *,
        nframes: int = 16,
        max_pixels: int = 200704,
        video_fps: float = 4,
        backend: str | None = None,
        backend_kwargs: dict[str, object] | None = None,
        mode: Literal["inline", "path", "auto"] = "inline",
        shared_dir: str | os.PathLike | None = None,
        max_nframes: int = MAX_NFRAMES,
        temp_dir: str | os.PathLike | None = None,
        fail_on_request_error: bool = False,
        fallback_score: float | None = None,
        max_workers: int = 2,
        timeout: float | None = None,
        stats: ClientStats | None = None,
        warn_interval_s: float = 60.0,
        close_pool: bool = False,
    ) -> None:
        if mode not in ("inline", "path", "auto"):
            raise ValueError(f"mode must be 'inline', 'path' or 'auto', got {mode!r}")
        if mode == "path" and shared_dir is None:
            raise ValueError("mode='path' needs shared_dir (a directory the server can read)")
        if shared_dir is not None and not Path(shared_dir).is_dir():
            raise ValueError(f"shared_dir {os.fspath(shared_dir)!r} is not a directory")
        if nframes < 1 or max_pixels < 1 or not video_fps > 0:
            raise ValueError("nframes and max_pixels must be >= 1 and video_fps > 0")
        if nframes > max_nframes:
            raise ValueError(
                f"nframes is {nframes}, over max_nframes={max_nframes} (reward servers refuse "
                "more; raise max_nframes only for a server that accepts them)"
            )
        super().__init__(
            pool,
            fail_on_request_error=fail_on_request_error,
            max_workers=max_workers,
            timeout=timeout,
            stats=stats,
            warn_interval_s=warn_interval_s,
            close_pool=close_pool,
            name="video score client",
        )
        self.nframes = int(nframes)
        self.max_pixels = int(max_pixels)
        self.video_fps = float(video_fps)
        self.backend = backend
        self.backend_kwargs = dict(backend_kwargs) if backend_kwargs else None
        self.mode = mode
        self.shared_dir = None if shared_dir is None else Path(shared_dir).resolve()
        self.temp_dir = None if temp_dir is None else Path(temp_dir)
        self.fallback_score = fallback_score
        self._auto_path = False

    def _sample(self, frames: Sequence[np.ndarray] | np.ndarray, copy: bool) -> list[np.ndarray]:
        count = len(frames)
        if count == 0:
            raise ValueError("score needs at least one frame")
        picked = []
        shape = None
        for index in sample_indices(count, self.nframes):
            frame = validate_frame(frames[index], f"frames[{index}]")
            if shape is None:
                shape = frame.shape
            elif frame.shape != shape:
                raise ValueError(f"frames[{index}] has shape {frame.shape}, expected {shape}")
            picked.append(np.array(frame, copy=True) if copy else frame)
        return picked

    def score(
        self, task_text: str, frames: Sequence[np.ndarray] | np.ndarray
    ) -> CallResult[float | None]:
        """Score an episode (frames: a list of HxWx3 uint8 or a TxHxWx3 array)."""
        _check_text(task_text)
        return self._score(task_text, self._sample(frames, copy=False))

    def submit_score(
        self, task_text: str, frames: Sequence[np.ndarray] | np.ndarray
    ) -> Future[CallResult[float | None]]:
        """Non-blocking :meth:`score` (sampled frames copied now; video encoded in a worker)."""
        _check_text(task_text)
        return self._submit(self._score, task_text, self._sample(frames, copy=True))

    @property
    def transport(self) -> Literal["inline", "path"]:
        """The transport the next request uses (``auto`` resolved)."""
        return "path" if self.mode == "path" or self._auto_path else "inline"

    def _score(self, task_text: str, frames: list[np.ndarray]) -> CallResult[float | None]:
        def call():
            try:
                return send(self.transport)
            except RewardServiceError as exc:
                if not self._server_demands_path(exc):
                    raise
                self._auto_path = True
                return send("path")

        def send(transport: str):
            directory = self.shared_dir if transport == "path" else self.temp_dir
            directory = directory if directory is not None else Path(tempfile.gettempdir())
            path = directory / f"evolve-score-{os.getpid()}-{uuid.uuid4().hex}.mp4"
            try:
                try:
                    write_mp4(path, frames, self.video_fps)
                except OSError as exc:
                    raise RewardServiceError(
                        None,
                        ROUTE_SCORE,
                        f"could not write the video to {path}: {exc}",
                        kind=ErrorKind.LOCAL_IO,
                    ) from exc
                source: dict[str, object]
                if transport == "path":
                    source = {"video_path": str(path)}
                else:
                    source = {"video_b64": b64encode_bytes(path.read_bytes())}
                    path.unlink(missing_ok=True)
                body = ScoreRequest(
                    task_text=task_text,
                    nframes=self.nframes,
                    max_pixels=self.max_pixels,
                    backend=self.backend,
                    backend_kwargs=self.backend_kwargs,
                    **source,
                )
                reply = self._request("POST", ROUTE_SCORE, json=body.model_dump(exclude_none=True))
            finally:
                path.unlink(missing_ok=True)
            parsed = parse_json_model(reply, ROUTE_SCORE, ScoreResponse)
            (value,) = check_finite(reply, ROUTE_SCORE, "score", [parsed.score], *SCORE_RANGE)
            return value, reply.endpoint, reply.attempts

        return self._run(ROUTE_SCORE, call, self.fallback_score)

    def _server_demands_path(self, exc: RewardServiceError) -> bool:
        """In auto mode with a shared dir: did an inline request get a 422 about video_path?"""
        return (
            self.mode == "auto"
            and not self._auto_path
            and self.shared_dir is not None
            and exc.status_code == 422
            and "video_path" in str(exc)
        )


def _check_text(task_text: str) -> None:
    if not isinstance(task_text, str) or not task_text.strip():
        raise ValueError(f"task_text must be a non-empty string, got {task_text!r}")
