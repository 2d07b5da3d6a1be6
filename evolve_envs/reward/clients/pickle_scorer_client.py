"""PickleScorerClient: the pickle scorer protocol (deepgen_rl / VeRL-Omni; docs/PROTOCOLS.md §3).

Both directions use the restricted codec (:mod:`evolve_envs.reward.protocol.pickle_codec`): no
global is ever resolved. ``score`` is synchronous; ``await compute_score`` runs on the client's
threads, so it works from any event loop (a fresh ``asyncio.run()`` per step included).

>>> import httpx
>>> from evolve_envs.reward.clients.endpoint_pool import EndpointPool
>>> from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps, safe_pickle_loads
>>> def scorer(request):                        # POST /, as deepgen-style servers
...     images = safe_pickle_loads(request.content)["images"]
...     return httpx.Response(200, content=safe_pickle_dumps({"scores": [0.25] * len(images)}))
>>> pool = EndpointPool("http://127.0.0.1:8111", transport=httpx.MockTransport(scorer))
>>> client = PickleScorerClient(pool, close_pool=True)
>>> img = np.zeros((16, 16, 3), np.uint8)
>>> client.score([img, img], ["a red cube", "a blue ball"]).value
[0.25, 0.25]
>>> client.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future

import httpx
import numpy as np

from evolve_envs.reward.clients.client_base import (
    ClientBase,
    check_finite,
    invalid_response,
    validate_model,
)
from evolve_envs.reward.clients.endpoint_pool import EndpointPool, describe_http_error
from evolve_envs.reward.clients.frame_encoding import (
    DEFAULT_JPEG_QUALITY,
    encode_jpeg,
    validate_frame,
)
from evolve_envs.reward.clients.pool_call import PoolResponse
from evolve_envs.reward.clients.results import SCORE_RANGE, CallResult, ClientStats
from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps, safe_pickle_loads, to_plain
from evolve_envs.reward.protocol.wire import PickleScoreResponse

__all__ = ["PickleScorerClient"]

_HEADERS = {"Content-Type": "application/octet-stream"}


def _describe_pickle_error(response: httpx.Response) -> str:
    """Error cause from a pickled ``{"error": str}`` body, else the generic description."""
    try:
        body = safe_pickle_loads(response.content)
    except ValueError:
        return describe_http_error(response)
    if isinstance(body, dict) and "error" in body:
        return f"HTTP {response.status_code} {response.reason_phrase}: {body['error']}"
    return describe_http_error(response)


class PickleScorerClient(ClientBase):
    """Client of a pickle-protocol image scorer.

    ``route``: ``"/"`` (deepgen-style servers; this project's also answers at ``"/pickle"``);
    ``fallback_score``: the per-image score of a failed call. The other arguments are
    :class:`~evolve_envs.reward.clients.progress_client.ProgressClient`'s.
    """

    def __init__(
        self,
        pool_or_url: EndpointPool | str | Sequence[str],
        *,
        route: str = "/",
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
        fail_on_request_error: bool = False,
        fallback_score: float = 0.0,
        max_workers: int = 4,
        timeout: float | None = None,
        stats: ClientStats | None = None,
        warn_interval_s: float = 60.0,
        close_pool: bool = False,
    ) -> None:
        super().__init__(
            pool_or_url,
            fail_on_request_error=fail_on_request_error,
            max_workers=max_workers,
            timeout=timeout,
            stats=stats,
            warn_interval_s=warn_interval_s,
            close_pool=close_pool,
            name="pickle scorer client",
        )
        if not 1 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality must be in [1, 100], got {jpeg_quality}")
        self.route = route if route.startswith("/") else "/" + route
        self.jpeg_quality = int(jpeg_quality)
        self.fallback_score = float(fallback_score)

    # ------------------------------------------------------------------ input checks

    def _prepare(
        self,
        images: Sequence[np.ndarray | bytes],
        prompts: Sequence[str],
        metadata: dict[str, object] | None,
        copy: bool,
    ) -> tuple[list[np.ndarray | bytes], list[str], dict[str, object]]:
        images, prompts = list(images), list(prompts)
        if not images:
            raise ValueError("score needs at least one image")
        if len(images) != len(prompts):
            raise ValueError(
                f"one prompt per image: got {len(images)} images and {len(prompts)} prompts"
            )
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError(f"prompts[{index}] must be str, got {type(prompt).__name__}")
        checked: list[np.ndarray | bytes] = []
        for index, image in enumerate(images):
            if isinstance(image, bytes | bytearray | memoryview):
                checked.append(bytes(image))
            else:
                frame = validate_frame(image, f"images[{index}]")
                checked.append(np.array(frame, copy=True) if copy else frame)
        meta = dict(metadata or {})
        safe_pickle_dumps(meta)  # raises UnsafePickleError (a ValueError) for non-plain data
        return checked, prompts, meta

    # ------------------------------------------------------------------ calls

    def score(
        self,
        images: Sequence[np.ndarray | bytes],
        prompts: Sequence[str],
        metadata: dict[str, object] | None = None,
    ) -> CallResult[list[float]]:
        """Score images (uint8 HxWx3 arrays or encoded image bytes), one prompt each.

        Fallback: ``[fallback_score] * len(images)``.
        """
        return self._score(*self._prepare(images, prompts, metadata, copy=False))

    def submit_score(
        self,
        images: Sequence[np.ndarray | bytes],
        prompts: Sequence[str],
        metadata: dict[str, object] | None = None,
    ) -> Future[CallResult[list[float]]]:
        """Non-blocking :meth:`score` (images copied now, encoded in a worker)."""
        return self._submit(self._score, *self._prepare(images, prompts, metadata, copy=True))

    async def compute_score(
        self,
        images: Sequence[np.ndarray | bytes],
        prompts: Sequence[str],
        metadata: dict[str, object] | None = None,
    ) -> CallResult[list[float]]:
        """``await``-able :meth:`score` for asyncio code; safe from any (and any new) loop."""
        future = self.submit_score(images, prompts, metadata)
        return await asyncio.wrap_future(future)

    def _score(
        self, images: list[np.ndarray | bytes], prompts: list[str], metadata: dict[str, object]
    ) -> CallResult[list[float]]:
        route = self.route
        count = len(images)

        def call():
            encoded = [
                img if isinstance(img, bytes) else encode_jpeg(img, self.jpeg_quality)
                for img in images
            ]
            body = safe_pickle_dumps({"images": encoded, "prompts": prompts, "metadata": metadata})
            reply = self._request(
                "POST", route, content=body, headers=_HEADERS, describe_error=_describe_pickle_error
            )
            scores = _parse_scores(reply, route, count)
            return scores, reply.endpoint, reply.attempts

        return self._run(route, call, lambda: [self.fallback_score] * count)


def _parse_scores(reply: PoolResponse, route: str, count: int) -> list[float]:
    try:
        payload = safe_pickle_loads(reply.response.content)
    except ValueError as exc:
        raise invalid_response(reply, route, f"body is not a safe pickle: {exc}") from None
    if isinstance(payload, dict) and "error" in payload and "scores" not in payload:
        raise invalid_response(reply, route, f"server error: {payload['error']}")
    if isinstance(payload, dict) and "scores" not in payload:
        # flow_grpo's remote scorers answer {"rewards": ...} or {"outputs": ...}
        for key in ("rewards", "outputs"):
            if key in payload:
                payload = {**payload, "scores": payload[key]}
                break
    if isinstance(payload, dict):  # numpy scores (HPSv2-style servers) become floats
        payload = {key: to_plain(value) for key, value in payload.items()}
    parsed = validate_model(reply, route, PickleScoreResponse, payload)
    if len(parsed.scores) != count:
        raise invalid_response(
            reply, route, f"expected {count} scores (one per image), got {len(parsed.scores)}"
        )
    return check_finite(reply, route, "scores", parsed.scores, *SCORE_RANGE)
