"""`ServiceState` (at `app.state.service`): the backend, its batcher, the metrics and the request
limits the routers share, and the steps every route takes with them (limit checks, decoding off
the event loop, backend failures answered naming the backend).

Example:
    >>> from evolve_envs.reward.service.backends.mock import MockBackend
    >>> state = ServiceState.build(MockBackend(), RequestLimits(), batch_window_ms=2.0)
    >>> state.limits.max_frames
    1024
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import Annotated, TypeVar

import numpy as np
from fastapi import Depends, Request

from evolve_envs.reward.protocol.body_budget import BodyBudget
from evolve_envs.reward.service.backends.base import (
    Backend,
    MalformedAnswerError,
    NotSupportedError,
    OutOfRangeError,
)
from evolve_envs.reward.service.decoding.base64_images import decode_image_b64
from evolve_envs.reward.service.decoding.images import ImageDecodeError, PixelBudget
from evolve_envs.reward.service.decoding.video import VideoDecodeError
from evolve_envs.reward.service.errors import ApiError, client_input
from evolve_envs.reward.service.limits import DEFAULT_LIMITS
from evolve_envs.reward.service.state.batching import (
    MAX_BATCH,
    MAX_WINDOW_S,
    Batcher,
    prepare_frame,
)
from evolve_envs.reward.service.state.metrics import Metrics

__all__ = ["RequestLimits", "ServiceState", "State", "decode_frames", "service_state"]

T = TypeVar("T")

log = logging.getLogger("evolve_envs.reward.service")


@dataclass(frozen=True)
class RequestLimits:
    """The per-request limits of `create_app`, each >= 1 (meanings: `ServiceLimits`' descriptions).

    Example:
        >>> RequestLimits(max_text_chars=0)
        Traceback (most recent call last):
        ...
        ValueError: max_text_chars must be >= 1, got 0
    """

    max_body_bytes: int = DEFAULT_LIMITS["max_body_bytes"]
    max_frames: int = DEFAULT_LIMITS["max_frames"]
    max_image_side: int = DEFAULT_LIMITS["max_image_side"]
    max_video_frames: int = DEFAULT_LIMITS["max_video_frames"]
    max_request_pixels: int = DEFAULT_LIMITS["max_request_pixels"]
    max_nframes: int = DEFAULT_LIMITS["max_nframes"]
    max_video_pixels: int = DEFAULT_LIMITS["max_video_pixels"]
    max_video_decode_pixels: int = DEFAULT_LIMITS["max_video_decode_pixels"]
    max_text_chars: int = DEFAULT_LIMITS["max_text_chars"]
    max_body_nodes: int = DEFAULT_LIMITS["max_body_nodes"]
    max_body_depth: int = DEFAULT_LIMITS["max_body_depth"]
    max_image_decode_bytes: int = DEFAULT_LIMITS["max_image_decode_bytes"]
    max_image_tokens: int = DEFAULT_LIMITS["max_image_tokens"]
    max_new_tokens: int = DEFAULT_LIMITS["max_new_tokens"]
    max_form_parts: int = DEFAULT_LIMITS["max_form_parts"]

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value < 1:
                raise ValueError(f"{field.name} must be >= 1, got {value}")

    @property
    def body_budget(self) -> BodyBudget:
        """The decoded-body budget of these limits (pickle and JSON bodies alike)."""
        return BodyBudget(self.max_body_nodes, self.max_body_bytes, self.max_body_depth)


def decode_frames(
    encoded: Sequence[object],
    max_side: int,
    what: str,
    budget: PixelBudget,
    decoder: Callable[..., np.ndarray] = decode_image_b64,
    keep: Sequence[int] | None = None,
    first_index: int = 0,
) -> list[np.ndarray]:
    """Decode every item (so any bad one is reported) one at a time, keeping only the
    prepared (model-size) copies of those whose index is in ``keep`` (all by default), so at
    most one full-size decoded frame is alive at a time."""
    wanted = None if keep is None else set(keep)
    prepared = []
    for i, item in enumerate(encoded):
        name = f"{what}[{first_index + i}]"
        with client_input(name, status=422):
            frame = decoder(item, max_side=max_side, what=name, budget=budget)
        if wanted is None or i in wanted:
            prepared.append(prepare_frame(frame))
        del frame
    return prepared


@dataclass
class ServiceState:
    """The backend, batcher, metrics and limits one app's routes share (see the module)."""

    backend: Backend
    metrics: Metrics
    batcher: Batcher
    limits: RequestLimits
    video_dirs: tuple[str, ...] = ()
    batch_window_ms: float = 5.0
    max_batch_window_ms: float = MAX_WINDOW_S * 1000.0
    max_batch: int = MAX_BATCH

    @classmethod
    def build(
        cls,
        backend: Backend,
        limits: RequestLimits,
        video_dirs: Sequence[str] = (),
        batch_window_ms: float = 5.0,
        max_batch_window_ms: float = MAX_WINDOW_S * 1000.0,
        max_batch: int = MAX_BATCH,
    ) -> ServiceState:
        """The state of a new app: fresh metrics and a batcher with these windows (ms)."""
        metrics = Metrics()
        batcher = Batcher(
            backend,
            metrics,
            max_batch=max_batch,
            window_s=batch_window_ms / 1000.0,
            max_window_s=max_batch_window_ms / 1000.0,
        )
        return cls(
            backend,
            metrics,
            batcher,
            limits,
            tuple(video_dirs),
            batch_window_ms,
            max_batch_window_ms,
            max_batch,
        )

    # --- request checks ------------------------------------------------------------------------
    def require(self, capability: str) -> None:
        """501 naming the backend unless it supports `capability`."""
        if not self.backend.supports(capability):
            raise ApiError(
                501,
                f"backend {self.backend.name!r} does not support {capability!r}",
                backend=self.backend.name,
                capability=capability,
            )

    def check_count(self, what: str, items: Sequence[object], *, allow_empty: bool = False) -> None:
        """422 when `items` is empty (unless allowed), 413 above `max_frames`."""
        limit = self.limits.max_frames
        if not items and not allow_empty:
            raise ApiError(422, f"{what} must not be empty")
        if len(items) > limit:
            raise ApiError(
                413, f"{what} has {len(items)} entries, more than the limit of {limit}", limit=limit
            )

    def check_text(self, what: str, text: str) -> None:
        """422 unless `text` is at most `max_text_chars` characters of valid Unicode."""
        limit = self.limits.max_text_chars
        if len(text) > limit:
            raise ApiError(422, f"{what} has {len(text)} characters, over the limit of {limit}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(
                422, f"{what} is not valid Unicode text (lone surrogate at position {exc.start})"
            ) from None

    def pixel_budget(self) -> PixelBudget:
        """A new request's decoding budget (pixels summed over its images, memory per image)."""
        return PixelBudget(
            self.limits.max_request_pixels, max_image_bytes=self.limits.max_image_decode_bytes
        )

    # --- work ----------------------------------------------------------------------------------
    async def decode(
        self, encoded: Sequence[object], what: str, budget: PixelBudget, **kwargs: object
    ) -> list[np.ndarray]:
        """Decode and prepare frames off the event loop (bad input: ImageDecodeError → 4xx)."""
        return await asyncio.to_thread(
            decode_frames, encoded, self.limits.max_image_side, what, budget, **kwargs
        )

    async def guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run backend work; backend failures become 5xx/501 ApiErrors naming the backend.

        A 5xx body says only which backend failed and how (500 failed, 502 an answer that
        breaks its format or range): what it raised (a judge's URL, a CUDA out-of-memory
        message, the model's answer) goes to the server log, never to the caller.
        """
        name = self.backend.name
        try:
            return await call()
        except (ApiError, ImageDecodeError, VideoDecodeError):
            raise
        except NotSupportedError as exc:
            raise ApiError(501, str(exc), backend=name, capability=exc.capability) from exc
        except MalformedAnswerError as exc:  # the model broke its answer format: not a score
            if not getattr(exc, "counted", False):
                self.metrics.record_malformed("video", 1)
            log.warning("backend %s: malformed answer: %s", name, exc)
            raise ApiError(
                502,
                f"backend {name!r} gave an answer that breaks its format (details in the server "
                "log)",
                backend=name,
                malformed_answer=True,
            ) from exc
        except OutOfRangeError as exc:
            log.error("backend %s: %s", name, exc)
            raise ApiError(
                502,
                f"backend {name!r} gave a value outside its documented range (details in the "
                "server log)",
                backend=name,
            ) from exc
        except Exception as exc:  # noqa: BLE001 - any backend failure is answered, not raised
            log.exception("backend %s failed", name)
            raise ApiError(
                500, f"backend {name!r} failed (details in the server log)", backend=name
            ) from exc

    async def run_in_chunks(
        self,
        kind: str,
        count: int,
        make_chunk: Callable[[int, int], Awaitable[list[object]]],
        request: Request,
    ) -> list[object]:
        """Results of `count` items, decoded and submitted `max_batch` at a time.

        The next chunk is decoded while the current one runs, and is queued only when the
        current one is done, so items of other requests queued meanwhile are served between a
        large request's chunks, and at most two chunks of decoded frames are held. When the
        caller has disconnected, the remaining chunks are dropped.
        """
        results: list[object] = []
        step = self.max_batch
        bounds = [(lo, min(lo + step, count)) for lo in range(0, count, step)]
        pending = asyncio.ensure_future(make_chunk(*bounds[0])) if bounds else None
        try:
            for k in range(len(bounds)):
                assert pending is not None
                items = await pending
                pending = None
                if k and await request.is_disconnected():
                    self.metrics.record_dropped(kind, count - bounds[k][0])
                    raise ApiError(499, "the client closed the connection; work dropped")
                if k + 1 < len(bounds):
                    pending = asyncio.ensure_future(make_chunk(*bounds[k + 1]))
                results.extend(
                    await self.guarded(lambda items=items: self.batcher.run(kind, items))
                )
        finally:
            if pending is not None:
                pending.cancel()
        return results


async def service_state(request: Request) -> ServiceState:
    """FastAPI dependency: the `ServiceState` of the app serving `request`."""
    return request.app.state.service


#: A route parameter annotated `State` receives the app's `ServiceState`.
State = Annotated[ServiceState, Depends(service_state)]
