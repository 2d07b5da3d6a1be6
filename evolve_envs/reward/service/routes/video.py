"""The episode video score protocol (RLinf-compatible): `POST /score` (docs/PROTOCOLS.md, 2).

Example:
    >>> [route.path for route in router.routes]
    ['/score']
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
from fastapi import APIRouter, Request

from evolve_envs.reward.protocol.wire import ScoreRequest, ScoreResponse
from evolve_envs.reward.service.backends.base import VideoItem
from evolve_envs.reward.service.decoding.base64_images import b64_head, b64_to_bytes
from evolve_envs.reward.service.decoding.video import (
    VideoDecodeError,
    container_format,
    read_video_bytes,
    read_video_file,
)
from evolve_envs.reward.service.errors import ApiError, client_input
from evolve_envs.reward.service.limits import PIXELS_PER_IMAGE_TOKEN
from evolve_envs.reward.service.routes.json_budget import (
    BudgetedJSONRoute,
    json_body_doc,
    parse_json_model,
)
from evolve_envs.reward.service.state.service_state import RequestLimits, ServiceState, State

__all__ = ["router"]

router = APIRouter(tags=["video score"], route_class=BudgetedJSONRoute)


def _check_model_work(req: ScoreRequest, limits: RequestLimits) -> None:
    """The caller's knobs within the limits: `nframes` and `max_pixels` (422), the image
    tokens they ask one model call for (413), `backend_kwargs.max_new_tokens` (422)."""
    if req.nframes > limits.max_nframes:
        raise ApiError(422, f"nframes is {req.nframes}, over the limit of {limits.max_nframes}")
    if req.max_pixels > limits.max_video_pixels:
        raise ApiError(
            422, f"max_pixels is {req.max_pixels}, over the limit of {limits.max_video_pixels}"
        )
    tokens = req.nframes * -(-req.max_pixels // PIXELS_PER_IMAGE_TOKEN)
    if tokens > limits.max_image_tokens:
        raise ApiError(
            413,
            f"nframes x max_pixels asks one model call for up to {tokens} image tokens (one per "
            f"{PIXELS_PER_IMAGE_TOKEN} pixels), over the limit of {limits.max_image_tokens}; "
            "lower nframes or max_pixels",
            limit=limits.max_image_tokens,
        )
    new_tokens = (req.backend_kwargs or {}).get("max_new_tokens")
    if isinstance(new_tokens, int) and new_tokens > limits.max_new_tokens:
        raise ApiError(
            422,
            f"backend_kwargs.max_new_tokens is {new_tokens}, over the limit of "
            f"{limits.max_new_tokens}",
        )


async def _read_frames(req: ScoreRequest, state: ServiceState) -> list[np.ndarray]:
    """The request's sampled frames, within the limits (see `_check_model_work`)."""
    limits = state.limits
    _check_model_work(req, limits)
    kwargs = {
        "nframes": req.nframes,
        "max_pixels": req.max_pixels,
        "max_frames": limits.max_video_frames,
        "max_side": limits.max_image_side,
        "max_decode_pixels": limits.max_video_decode_pixels,
        "max_frame_bytes": limits.max_image_decode_bytes,
    }
    if req.video_b64 is not None:
        video_b64 = req.video_b64

        def read_inline() -> list[np.ndarray]:
            with client_input("video_b64", status=422):
                # the container's magic bytes first: no need to decode the rest of a non-video
                if container_format(b64_head(video_b64, 16, what="video_b64")) is None:
                    raise VideoDecodeError("video is not an MP4, MOV, Matroska/WebM or AVI file")
                return read_video_bytes(b64_to_bytes(video_b64, what="video_b64"), **kwargs)

        return await asyncio.to_thread(read_inline)
    video_path = req.video_path

    def read_file() -> list[np.ndarray]:
        with client_input("video_path", status=422):
            return read_video_file(video_path, allowed_dirs=state.video_dirs, **kwargs)

    return await asyncio.to_thread(read_file)


@router.post("/score", response_model=ScoreResponse, openapi_extra=json_body_doc(ScoreRequest))
async def score(request: Request, state: State) -> ScoreResponse:
    """Score an episode video (path on a shared filesystem, or inline base64 bytes)."""
    req = await parse_json_model(request, ScoreRequest)
    state.require("video")
    frames = await _read_frames(req, state)
    state.check_text("task_text", req.task_text)
    be = state.backend
    try:
        backend_kwargs = be.check_video_options(dict(req.backend_kwargs or {}))
    except (ValueError, TypeError) as exc:
        raise ApiError(422, f"invalid backend_kwargs: {exc}") from exc
    stop = threading.Event()  # set when the caller disconnects: backends may stop early
    options = {"backend": req.backend, "backend_kwargs": backend_kwargs, "stop_event": stop}
    item = VideoItem(req.task_text, tuple(frames), options)

    async def watch_caller() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.2)
        stop.set()

    watcher = asyncio.create_task(watch_caller())
    try:
        value, raw_text = await state.guarded(
            lambda: state.batcher.call("video", be.score_video, item)
        )
    finally:
        watcher.cancel()
    if stop.is_set():
        state.metrics.record_dropped("video", 1)
        raise ApiError(499, "the client closed the connection; work dropped")
    return ScoreResponse(score=float(value), raw_text=raw_text)
