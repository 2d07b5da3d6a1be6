"""The reward service's FastAPI application: `create_app(backend, ...)`.

Routes (docs/PROTOCOLS.md):

* progress (VLAC-compatible): `POST /trajectory-critic`, `POST /pairwise-critic`, `POST /done`,
  `GET /capabilities`, `POST /healthcheck`, `GET /health`;
* episode video score (RLinf-compatible): `POST /score`;
* pickle scorer (deepgen_rl / VeRL-Omni / flow_grpo-compatible): `POST /` and `POST /pickle`
  (`pickle_at_root=False` drops `/`);
* `GET /metrics`; with `enable_faults=True` also the fault-injection admin routes
  (`reward_service.faults`, imported only then: production apps carry none of it).

Every error is JSON `{"error": ..., ...}` with a 4xx/5xx status, except the pickle routes,
which answer `pickle.dumps({"error": str})` (as their protocol says) unless the request's
`Accept` header asks for `application/json`. A route the backend cannot serve answers 501
naming the backend. Limits (`reward_service.limits`): body size, frames per request, image
side and decoded pixels per request (413, checked from headers before decoding); undecodable,
truncated or inconsistent images, invalid fields and over-limit caller knobs answer 422, a body
that is not JSON/pickle 400. Only loopback `Host` names are served by default (421 otherwise; a
foreign `Origin` gets 403); `/score` reads files only inside `video_dirs` (403 when none).

Example:
    >>> from reward_service.backends.mock import MockBackend
    >>> app = create_app(MockBackend(), token=None, batch_window_ms=5)
    >>> # uvicorn.run(app, host="127.0.0.1", port=8111)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reward_protocol.pickle_codec import (
    UnsafePickleError,
    safe_pickle_dumps,
    safe_pickle_loads,
    to_plain,
)
from reward_protocol.progress import value_list
from reward_protocol.wire import (
    Capabilities,
    DoneRequest,
    DoneResponse,
    ErrorResponse,
    HealthResponse,
    PairwiseCriticRequest,
    PairwiseCriticResponse,
    PickleScoreRequest,
    ScoreRequest,
    ScoreResponse,
    TrajectoryCriticRequest,
    TrajectoryCriticResponse,
)
from reward_service.backends import make_backend
from reward_service.backends.base import (
    Backend,
    CriticItem,
    DoneItem,
    ImageScoreItem,
    NotSupportedError,
    VideoItem,
)
from reward_service.batching import MAX_BATCH, MAX_WINDOW_S, Batcher, prepare_frame
from reward_service.connections import ConcurrencyLimitMiddleware
from reward_service.image_decoding import (
    ImageDecodeError,
    PixelBudget,
    b64_to_bytes,
    decode_image_b64,
    decode_image_bytes,
)
from reward_service.limits import DEFAULT_LIMITS
from reward_service.metrics import PROMETHEUS_CONTENT_TYPE, Metrics, wants_prometheus
from reward_service.swagger_assets import add_local_docs
from reward_service.video_decoding import VideoDecodeError, read_video_bytes, read_video_file

__all__ = ["create_app", "ApiError", "DEFAULT_LIMITS"]

log = logging.getLogger("reward_service")


PICKLE_CONTENT_TYPE = "application/octet-stream"
# Content types a web page can send cross-origin without a CORS preflight: never a pickle.
_BROWSER_SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")  # server.LOOPBACK_HOSTS


class ApiError(Exception):
    """An error answered as JSON `{"error": message, **extra}` with `status_code`."""

    def __init__(self, status_code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.extra = extra


class BodyTooLargeError(StarletteHTTPException):
    """Raised while reading a body larger than the limit (FastAPI re-raises HTTP exceptions)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than the limit of {limit} bytes")


def _error_payload(message: str, **extra: Any) -> dict[str, Any]:
    return {"error": message, **extra}


def _json_error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(_error_payload(message, **extra), status_code=status)


# ------------------------------------------------------------------------------- middlewares


class _MetricsMiddleware:
    def __init__(self, app: Any, metrics: Metrics, known_routes: set[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.known_routes = known_routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in self.known_routes else "other"
        status = 500
        start = time.perf_counter()
        self.metrics.request_started()

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.record_request(route, status, time.perf_counter() - start)


class _AuthMiddleware:
    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization")
        if header is None or not hmac.compare_digest(header, self.expected):
            message = "missing bearer token" if header is None else "invalid bearer token"
            response = _json_error(401, message)
            response.headers["www-authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _host_name(value: str) -> str:
    """The host part of a Host header or an Origin's authority, lower-case, without the port."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8111
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class _HostMiddleware:
    """Refuses requests whose `Host` (or `Origin`) names a host outside the allow-list (421/403).

    A web page that rebinds its own DNS name to 127.0.0.1 still sends its own name as `Host`,
    and a cross-site page sends its `Origin`: both are refused, so a browser cannot be used to
    reach a loopback-only server.
    """

    def __init__(self, app: Any, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allow_any = "*" in allowed_hosts
        self.allowed = {_host_name(h) for h in allowed_hosts}

    def _allowed(self, host: str) -> bool:
        return self.allow_any or _host_name(host) in self.allowed

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        response = None
        if not self._allowed(host):
            response = _json_error(
                421, f"host {host[:100]!r} is not served here (see --allowed-hosts)"
            )
        elif origin is not None and origin != b"null":
            authority = origin.decode("latin-1").split("://", 1)[-1]
            if not self._allowed(authority):
                response = _json_error(403, "cross-origin requests are not accepted")
        elif origin == b"null":
            response = _json_error(403, "cross-origin requests are not accepted")
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _BodyLimitMiddleware:
    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.limit
            except ValueError:
                too_big = False
            if too_big:
                response = _json_error(
                    413,
                    f"request body of {int(length)} bytes is larger than the limit of "
                    f"{self.limit} bytes",
                    limit=self.limit,
                )
                await response(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError(self.limit)
            return message

        await self.app(scope, limited_receive, send)


# ---------------------------------------------------------------------------------- helpers


def _check_count(what: str, items: Sequence[Any], limit: int, *, allow_empty: bool = False) -> None:
    if not items and not allow_empty:
        raise ApiError(422, f"{what} must not be empty")
    if len(items) > limit:
        raise ApiError(
            413, f"{what} has {len(items)} entries, more than the limit of {limit}", limit=limit
        )


def _decode_frames(
    encoded: Sequence[Any],
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
        frame = decoder(item, max_side=max_side, what=f"{what}[{first_index + i}]", budget=budget)
        if wanted is None or i in wanted:
            prepared.append(prepare_frame(frame))
        del frame
    return prepared


def _check_text(what: str, text: str, limit: int) -> None:
    """422 unless `text` is at most `limit` characters of valid Unicode (no lone surrogates)."""
    if len(text) > limit:
        raise ApiError(422, f"{what} has {len(text)} characters, over the limit of {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(
            422, f"{what} is not valid Unicode text (lone surrogate at position {exc.start})"
        ) from None


def _reference_indices(count: int, ref_num: int | None) -> list[int]:
    """VLAC's reference sampling: the first frame and `ref_num - 1` evenly spaced others."""
    if ref_num is None or ref_num >= count or ref_num <= 1:
        return list(range(count if ref_num is None or ref_num > 1 else min(count, 1)))
    delta = (count - 1) / (ref_num - 1)
    return [int(i * delta) for i in range(ref_num)]


M = TypeVar("M", bound=BaseModel)


async def _parse_json_body(request: Request, model: type[M]) -> M:
    """Validate the body with pydantic's own JSON parser (no intermediate Python objects).

    For routes whose bodies can be tens of MB (a 1,024-frame trajectory): `json.loads` plus
    validation blocks the event loop about ten times longer. Errors are reported exactly as
    FastAPI reports them (400 invalid JSON, 422 invalid fields).
    """
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = [{**err, "loc": ("body", *err.get("loc", ()))} for err in exc.errors()]
        raise RequestValidationError(errors) from None


def _json_body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI `requestBody` for a route that reads its JSON body with `_parse_json_body`."""
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _clean_validation_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    cleaned = []
    for err in errors:
        item = {k: err[k] for k in ("type", "loc", "msg") if k in err}
        item["loc"] = [str(part) for part in item.get("loc", [])]
        cleaned.append(item)
    return cleaned


def _summarise(errors: list[dict[str, Any]]) -> str:
    parts = [f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors[:3]]
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more


# ------------------------------------------------------------------------------- application


def create_app(
    backend: Backend | str,
    *,
    backend_kwargs: dict[str, Any] | None = None,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_LIMITS["max_body_bytes"],
    max_frames: int = DEFAULT_LIMITS["max_frames"],
    max_image_side: int = DEFAULT_LIMITS["max_image_side"],
    max_video_frames: int = DEFAULT_LIMITS["max_video_frames"],
    max_request_pixels: int = DEFAULT_LIMITS["max_request_pixels"],
    max_nframes: int = DEFAULT_LIMITS["max_nframes"],
    max_video_pixels: int = DEFAULT_LIMITS["max_video_pixels"],
    max_video_decode_pixels: int = DEFAULT_LIMITS["max_video_decode_pixels"],
    video_dirs: Sequence[str] = (),
    max_text_chars: int = DEFAULT_LIMITS["max_text_chars"],
    max_concurrent_requests: int = DEFAULT_LIMITS["max_concurrent_requests"],
    batch_window_ms: float = 5.0,
    max_batch_window_ms: float = MAX_WINDOW_S * 1000.0,
    max_batch: int = MAX_BATCH,
    enable_faults: bool = False,
    pickle_at_root: bool = True,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
) -> FastAPI:
    """Build the reward service around `backend` (an instance, or a registered name).

    Args:
        backend: a `Backend`, or a name from `reward_service.backends.BACKENDS` built with
            `backend_kwargs` (an unknown name raises `UnknownBackendError`, a `ValueError`).
        token: if set, every request needs `Authorization: Bearer <token>` (else 401).
        max_body_bytes: larger request bodies answer 413.
        max_frames: most frames (trajectory, reference, pickle images) per request (413).
        max_image_side: most pixels per image side (413).
        max_video_frames: most frames in a `/score` video before sampling (413).
        max_request_pixels: most decoded pixels per request, checked from the image headers
            before decoding (413); JPEGs count at their DCT-reduced size.
        max_nframes: most frames a `/score` caller may ask to be sampled (422 above).
        max_video_pixels: most `max_pixels` per sampled frame a `/score` caller may ask (422).
        max_video_decode_pixels: most frames x width x height a `/score` video may need decoded,
            read from the container before decoding (413).
        max_text_chars: most characters in a task or prompt (422 above).
        max_concurrent_requests: requests handled at once; more answer 503 with Retry-After.
        video_dirs: directories `/score` may read `video_path` files from (resolved; symlinks
            out of them are refused). Empty (the default): path mode is off (403).
        batch_window_ms: how long a backend batch waits for more items from other requests.
        max_batch_window_ms: the adaptive window's cap: while recent bursts of requests were
            bigger than the batch so far, it waits for the rest up to a quarter of the backend's
            recent call time, at most this long, after the batch's first item
            (`reward_service.batching`); <= `batch_window_ms` turns that off.
        max_batch: most items per backend call (<= 8 keeps GPU memory bounded).
        enable_faults: add the fault-injection admin routes (tests and drills only).
        pickle_at_root: also serve the pickle scorer at `POST /` (the default, as deepgen_rl
            and VeRL-Omni clients expect).
        allowed_hosts: `Host` header values served (loopback names by default; `"*"` for any):
            other hosts answer 421, foreign `Origin` headers 403 (against DNS rebinding).
    """
    if isinstance(backend, str):
        backend = make_backend(backend, **(backend_kwargs or {}))
    elif backend_kwargs:
        raise ValueError("backend_kwargs only apply when backend is given by name")
    for name, value in (
        ("max_body_bytes", max_body_bytes),
        ("max_frames", max_frames),
        ("max_image_side", max_image_side),
        ("max_video_frames", max_video_frames),
        ("max_request_pixels", max_request_pixels),
        ("max_nframes", max_nframes),
        ("max_video_pixels", max_video_pixels),
        ("max_video_decode_pixels", max_video_decode_pixels),
        ("max_text_chars", max_text_chars),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    be: Backend = backend
    metrics = Metrics()
    batcher = Batcher(
        be,
        metrics,
        max_batch=max_batch,
        window_s=batch_window_ms / 1000.0,
        max_window_s=max_batch_window_ms / 1000.0,
    )
    app_class: type[FastAPI] = FastAPI
    if enable_faults:  # tests and drills only: the module is not even imported otherwise
        from reward_service import faults

        app_class = faults.FaultableApp

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        yield
        await batcher.aclose()
        await asyncio.to_thread(be.close)

    app = app_class(
        title="evolve-envs reward service",
        version="0.1.0",
        description=(
            f"Reward model service (backend: {be.name}). Progress (VLAC-compatible), "
            "episode video score (RLinf-compatible) and pickle scorer protocols."
        ),
        lifespan=lifespan,
        docs_url=None,  # served from local assets below (add_local_docs)
        responses={
            400: {"model": ErrorResponse},
            401: {"model": ErrorResponse},
            413: {"model": ErrorResponse},
            422: {"model": ErrorResponse},
            500: {"model": ErrorResponse},
            501: {"model": ErrorResponse},
        },
    )
    add_local_docs(app)
    app.state.backend = be
    app.state.metrics = metrics
    app.state.batcher = batcher
    app.state.faults = None

    def require(capability: str) -> None:
        if not be.supports(capability):
            raise ApiError(
                501,
                f"backend {be.name!r} does not support {capability!r}",
                backend=be.name,
                capability=capability,
            )

    async def guarded(call: Callable[[], Awaitable[Any]]) -> Any:
        """Run backend work; backend failures become 500/501 ApiErrors naming the backend."""
        try:
            return await call()
        except (ApiError, ImageDecodeError, VideoDecodeError):
            raise
        except NotSupportedError as exc:
            raise ApiError(501, str(exc), backend=be.name, capability=exc.capability) from exc
        except Exception as exc:  # noqa: BLE001 - any backend failure is answered, not raised
            log.exception("backend %s failed", be.name)
            raise ApiError(
                500, f"backend {be.name!r} failed: {type(exc).__name__}: {exc}", backend=be.name
            ) from exc

    async def decode(
        encoded: Sequence[Any], what: str, budget: PixelBudget, **kwargs: Any
    ) -> list[np.ndarray]:
        """Decode and prepare frames off the event loop (bad input: ImageDecodeError → 4xx)."""
        return await asyncio.to_thread(
            _decode_frames, encoded, max_image_side, what, budget, **kwargs
        )

    async def run_in_chunks(
        kind: str,
        count: int,
        make_chunk: Callable[[int, int], Awaitable[list[Any]]],
        request: Request,
    ) -> list[Any]:
        """Results of `count` items, decoded and submitted `max_batch` at a time.

        The next chunk is decoded while the current one runs, and is queued only when the
        current one is done, so items of other requests queued meanwhile are served between a
        large request's chunks, and at most two chunks of decoded frames are held. When the
        caller has disconnected, the remaining chunks are dropped.
        """
        results: list[Any] = []
        bounds = [(lo, min(lo + max_batch, count)) for lo in range(0, count, max_batch)]
        pending = asyncio.ensure_future(make_chunk(*bounds[0])) if bounds else None
        try:
            for k in range(len(bounds)):
                assert pending is not None
                items = await pending
                pending = None
                if k and await request.is_disconnected():
                    metrics.record_dropped(kind, count - bounds[k][0])
                    raise ApiError(499, "the client closed the connection; work dropped")
                if k + 1 < len(bounds):
                    pending = asyncio.ensure_future(make_chunk(*bounds[k + 1]))
                results.extend(await guarded(lambda items=items: batcher.run(kind, items)))
        finally:
            if pending is not None:
                pending.cancel()
        return results

    # --- exception handlers --------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        if request.url.path in pickle_paths and not _wants_json(request):
            return Response(
                safe_pickle_dumps({"error": exc.message}),
                status_code=exc.status_code,
                media_type=PICKLE_CONTENT_TYPE,
            )
        return _json_error(exc.status_code, exc.message, **exc.extra)

    @app.exception_handler(ImageDecodeError)
    @app.exception_handler(VideoDecodeError)
    async def _decode_error(request: Request, exc: ImageDecodeError | VideoDecodeError) -> Response:
        return await _api_error(request, ApiError(exc.status_code, str(exc)))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = _clean_validation_errors(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return _json_error(400, "request body is not valid JSON", detail=errors)
        return _json_error(422, f"invalid request: {_summarise(errors)}", detail=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        response = _json_error(exc.status_code, message)
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return _json_error(500, f"internal server error: {type(exc).__name__}: {exc}")

    # --- health, capabilities, metrics ---------------------------------------------------------
    @app.get("/health", response_model=HealthResponse, tags=["service"])
    async def health() -> HealthResponse:
        """Liveness: the server is up and its backend loaded."""
        return HealthResponse(backend=be.name)

    @app.post("/healthcheck", response_model=HealthResponse, tags=["progress"])
    async def healthcheck() -> HealthResponse:
        """VLAC-style health check."""
        return HealthResponse(backend=be.name)

    @app.get("/capabilities", response_model=Capabilities, tags=["service"])
    async def capabilities() -> Capabilities:
        """Which routes the backend can serve (the others answer 501)."""
        return be.capabilities()

    @app.get("/metrics", tags=["service"])
    async def get_metrics(request: Request) -> Any:
        """Request counts, errors, backend batch sizes and latency percentiles (ms), as JSON;
        in Prometheus' text format when `Accept` asks for text/plain or OpenMetrics."""
        if wants_prometheus(request.headers.get("accept")):
            return Response(metrics.prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)
        snap = metrics.snapshot()
        snap["backend"] = be.name
        snap["batch_window_ms"] = batch_window_ms
        snap["max_batch_window_ms"] = max_batch_window_ms
        snap["max_batch"] = max_batch
        snap["process"] = {
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        return snap

    # --- progress protocol ---------------------------------------------------------------------
    @app.post(
        "/trajectory-critic",
        response_model=TrajectoryCriticResponse,
        tags=["progress"],
        openapi_extra=_json_body_doc(TrajectoryCriticRequest),
    )
    async def trajectory_critic(request: Request) -> TrajectoryCriticResponse:
        """Critics between consecutive frames of `frames[::skip]` and their accumulated values."""
        req = await _parse_json_body(request, TrajectoryCriticRequest)
        _check_count("frames", req.frames, max_frames)
        _check_text("task", req.task, max_text_chars)
        if req.reference is not None:
            _check_count("reference", req.reference, max_frames, allow_empty=True)
        budget = PixelBudget(max_request_pixels)
        sampled = req.frames[:: req.skip]
        reference = None
        if req.reference:
            keep = _reference_indices(len(req.reference), req.ref_num)
            reference = tuple(await decode(req.reference, "reference", budget, keep=keep))
        (first,) = await decode(sampled[:1], "frames", budget)
        last = {"frame": first}

        async def make_chunk(lo: int, hi: int) -> list[CriticItem]:
            frames = await decode(sampled[lo + 1 : hi + 1], "frames", budget, first_index=lo + 1)
            items = []
            for frame in frames:
                items.append(CriticItem(req.task, last["frame"], frame, first, reference))
                last["frame"] = frame
            return items

        critics = await run_in_chunks("critic", len(sampled) - 1, make_chunk, request)
        critic_list = [float(c) for c in critics]
        return TrajectoryCriticResponse(value_list=value_list(critic_list), critic_list=critic_list)

    @app.post("/pairwise-critic", response_model=PairwiseCriticResponse, tags=["progress"])
    async def pairwise_critic(req: PairwiseCriticRequest) -> PairwiseCriticResponse:
        """How much closer `image_b` is to completing `task` than `image_a`, in [-100, 100]."""
        require("pairwise")
        _check_text("task", req.task, max_text_chars)
        a, b = await decode([req.image_a, req.image_b], "images", PixelBudget(max_request_pixels))
        (critic,) = await guarded(lambda: batcher.run("critic", [CriticItem(req.task, a, b, a)]))
        return PairwiseCriticResponse(critic=float(critic))

    @app.post("/done", response_model=DoneResponse, tags=["progress"])
    async def done(req: DoneRequest) -> DoneResponse:
        """Whether `curr_frame` shows the task completed, with a probability."""
        require("done")
        _check_text("task", req.task, max_text_chars)
        if req.reference is not None:
            _check_count("reference", req.reference, max_frames, allow_empty=True)
        budget = PixelBudget(max_request_pixels)
        first, prev, curr = await decode(
            [req.first_frame, req.prev_frame, req.curr_frame], "done", budget
        )
        reference = None
        if req.reference:
            reference = tuple(await decode(req.reference, "reference", budget))
        item = DoneItem(req.task, first, prev, curr, reference)
        ((is_done, prob),) = await guarded(lambda: batcher.run("done", [item]))
        return DoneResponse(done=bool(is_done), prob=float(prob))

    # --- episode video score -------------------------------------------------------------------
    @app.post("/score", response_model=ScoreResponse, tags=["video score"])
    async def score(req: ScoreRequest, request: Request) -> ScoreResponse:
        """Score an episode video (path on a shared filesystem, or inline base64 bytes)."""
        require("video")
        if req.nframes > max_nframes:
            raise ApiError(422, f"nframes is {req.nframes}, over the limit of {max_nframes}")
        if req.max_pixels > max_video_pixels:
            raise ApiError(
                422, f"max_pixels is {req.max_pixels}, over the limit of {max_video_pixels}"
            )
        kwargs = {
            "nframes": req.nframes,
            "max_pixels": req.max_pixels,
            "max_frames": max_video_frames,
            "max_side": max_image_side,
            "max_decode_pixels": max_video_decode_pixels,
        }
        if req.video_b64 is not None:
            video_b64 = req.video_b64

            def read_inline() -> list[np.ndarray]:
                return read_video_bytes(b64_to_bytes(video_b64, what="video_b64"), **kwargs)

            frames = await asyncio.to_thread(read_inline)
        else:
            frames = await asyncio.to_thread(
                read_video_file, req.video_path, allowed_dirs=video_dirs, **kwargs
            )
        _check_text("task_text", req.task_text, max_text_chars)
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
            value, raw_text = await guarded(lambda: batcher.call("video", be.score_video, item))
        finally:
            watcher.cancel()
        if stop.is_set():
            metrics.record_dropped("video", 1)
            raise ApiError(499, "the client closed the connection; work dropped")
        return ScoreResponse(score=float(value), raw_text=raw_text)

    # --- pickle scorer -------------------------------------------------------------------------
    pickle_paths = {"/pickle"} | ({"/"} if pickle_at_root else set())

    async def pickle_score(request: Request) -> Response:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type in _BROWSER_SIMPLE_TYPES:
            raise ApiError(
                415,
                f"a pickle body must not be sent as {content_type}; use {PICKLE_CONTENT_TYPE}",
            )
        require("image_score")
        body = await request.body()
        try:
            raw = safe_pickle_loads(body)
        except UnsafePickleError as exc:
            raise ApiError(400, f"rejected pickle body: {exc}") from exc
        if not isinstance(raw, dict):
            raise ApiError(422, f"pickle body must be a dict, got {type(raw).__name__}")
        raw = {key: to_plain(value) for key, value in raw.items()}
        try:
            req = PickleScoreRequest.model_validate(raw)
        except ValidationError as exc:
            errors = _clean_validation_errors(exc.errors())
            raise ApiError(422, f"invalid pickle request: {_summarise(errors)}") from exc
        _check_count("images", req.images, max_frames)
        for i, prompt in enumerate(req.prompts or []):
            _check_text(f"prompts[{i}]", prompt, max_text_chars)

        budget = PixelBudget(max_request_pixels)
        prompts = list(req.prompts or [])

        async def make_chunk(lo: int, hi: int) -> list[ImageScoreItem]:
            images = await decode(
                req.images[lo:hi], "images", budget, decoder=decode_image_bytes, first_index=lo
            )
            return [
                ImageScoreItem(prompt, image, dict(req.metadata))
                for prompt, image in zip(prompts[lo:hi], images, strict=True)
            ]

        scores = await run_in_chunks("image", len(req.images), make_chunk, request)
        payload: dict[str, Any] = {"scores": [float(s) for s in scores]}
        if req.flow_grpo_variant:  # flow_grpo's remote scorers answer with these keys
            payload.update(
                rewards=payload["scores"],
                strict_rewards=payload["scores"],
                group_rewards={},
                group_strict_rewards={},
            )
        if _wants_json(request):
            return JSONResponse(payload)
        return Response(safe_pickle_dumps(payload), media_type=PICKLE_CONTENT_TYPE)

    pickle_doc = {
        "requestBody": {
            "required": True,
            "content": {
                PICKLE_CONTENT_TYPE: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": 'pickle.dumps({"images": [bytes], "prompts": [str], '
                        '"metadata": {}}); unpickled without resolving any global',
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": 'pickle.dumps({"scores": [float]})',
                "content": {PICKLE_CONTENT_TYPE: {}},
            }
        },
    }
    for path in sorted(pickle_paths, reverse=True):
        app.add_api_route(
            path,
            pickle_score,
            methods=["POST"],
            tags=["pickle scorer"],
            summary="Score images against prompts (pickle protocol)",
            openapi_extra=pickle_doc,
            response_class=Response,
        )

    # Middlewares, innermost first: faults, body limit, auth, metrics (outermost).
    if enable_faults:
        faults.install(app)  # admin routes + the innermost middleware
    known_routes = {route.path for route in app.routes if hasattr(route, "path")}
    app.add_middleware(_BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    if token:
        app.add_middleware(_AuthMiddleware, token=token)
    app.add_middleware(_HostMiddleware, allowed_hosts=tuple(allowed_hosts))
    app.add_middleware(ConcurrencyLimitMiddleware, limit=max_concurrent_requests)
    app.add_middleware(_MetricsMiddleware, metrics=metrics, known_routes=known_routes)
    return app
