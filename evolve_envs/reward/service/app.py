"""The reward service's FastAPI application: `create_app(backend, ...)` assembles the routers, the
shared state, the error handlers and the middlewares (docs/reward-service.md, "Inside the
service").

Example:
    >>> from evolve_envs.reward.service.backends.mock import MockBackend
    >>> app = create_app(MockBackend(), token=None, batch_window_ms=5)
    >>> sorted(app.openapi()["paths"])[:3]
    ['/', '/capabilities', '/done']
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI

from evolve_envs.reward.protocol.wire import ErrorResponse
from evolve_envs.reward.service.backends import make_backend
from evolve_envs.reward.service.backends.base import Backend
from evolve_envs.reward.service.errors import PICKLE_CONTENT_TYPE, ApiError, install_error_handlers
from evolve_envs.reward.service.limits import DEFAULT_LIMITS
from evolve_envs.reward.service.middleware.admission import (
    BodyLimitMiddleware,
    ConcurrencyLimitMiddleware,
)
from evolve_envs.reward.service.middleware.auth import add_bearer_auth
from evolve_envs.reward.service.middleware.host_allowlist import (
    DEFAULT_ALLOWED_HOSTS,
    HostAllowListMiddleware,
)
from evolve_envs.reward.service.middleware.model_headers import (
    ModelHeadersMiddleware,
    model_headers,
)
from evolve_envs.reward.service.routes import chat as chat_routes
from evolve_envs.reward.service.routes import critic as critic_routes
from evolve_envs.reward.service.routes import pickle_scorer as pickle_routes
from evolve_envs.reward.service.routes import robometer as robometer_routes
from evolve_envs.reward.service.routes import service as service_routes
from evolve_envs.reward.service.routes import video as video_routes
from evolve_envs.reward.service.routes.swagger_assets import add_local_docs
from evolve_envs.reward.service.state.batching import MAX_BATCH, MAX_WINDOW_S
from evolve_envs.reward.service.state.metrics import MetricsMiddleware
from evolve_envs.reward.service.state.service_state import RequestLimits, ServiceState

__all__ = [
    "create_app",
    "ApiError",
    "DEFAULT_ALLOWED_HOSTS",
    "DEFAULT_LIMITS",
    "PICKLE_CONTENT_TYPE",
    "RequestLimits",
]

_ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 500, 501)
}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    state: ServiceState = app.state.service
    await state.batcher.aclose()
    await asyncio.to_thread(state.backend.close)


def _new_app(backend_name: str, enable_faults: bool) -> FastAPI:
    """The app without routes: FastAPI's class (fault injection's with `enable_faults`), local
    Swagger UI assets, every error response documented as `ErrorResponse`."""
    app_class: type[FastAPI] = FastAPI
    if enable_faults:  # tests and drills only: the module is not even imported otherwise
        from evolve_envs.reward.service.middleware.faults import FaultableApp

        app_class = FaultableApp
    app = app_class(
        title="evolve-envs reward service",
        version="0.1.0",
        description=(
            f"Reward model service (backend: {backend_name}). Progress (VLAC-compatible), "
            "episode video score (RLinf-compatible) and pickle scorer protocols."
        ),
        lifespan=_lifespan,
        docs_url=None,  # served from local assets (add_local_docs)
        responses=_ERROR_RESPONSES,
    )
    add_local_docs(app)
    return app


def create_app(
    backend: Backend | str,
    *,
    backend_kwargs: dict[str, object] | None = None,
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
    max_body_nodes: int = DEFAULT_LIMITS["max_body_nodes"],
    max_body_depth: int = DEFAULT_LIMITS["max_body_depth"],
    max_image_decode_bytes: int = DEFAULT_LIMITS["max_image_decode_bytes"],
    max_image_tokens: int = DEFAULT_LIMITS["max_image_tokens"],
    max_new_tokens: int = DEFAULT_LIMITS["max_new_tokens"],
    max_form_parts: int = DEFAULT_LIMITS["max_form_parts"],
    max_concurrent_requests: int = DEFAULT_LIMITS["max_concurrent_requests"],
    max_inflight_body_bytes: int = DEFAULT_LIMITS["max_inflight_body_bytes"],
    batch_window_ms: float = 5.0,
    max_batch_window_ms: float = MAX_WINDOW_S * 1000.0,
    max_batch: int = MAX_BATCH,
    enable_faults: bool = False,
    pickle_at_root: bool = True,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
) -> FastAPI:
    """Build the reward service around `backend` (an instance, or a registered name).

    Args:
        backend: a `Backend`, or a name from `evolve_envs.reward.service.backends.BACKENDS` built
            with `backend_kwargs` (an unknown name raises `UnknownBackendError`, a `ValueError`).
        token: if set, every request needs `Authorization: Bearer <token>` (else 401).
        max_body_bytes: this and the other `max_*` keywords (`max_frames`, `max_image_side`,
            `max_video_frames`, `max_request_pixels`, `max_nframes`, `max_video_pixels`,
            `max_video_decode_pixels`, `max_text_chars`, `max_body_nodes`, `max_body_depth`,
            `max_image_decode_bytes`, `max_image_tokens`, `max_new_tokens`, `max_form_parts`)
            are the request limits, each >= 1 (`RequestLimits` says
            what each bounds and how it answers).
        video_dirs: directories `/score` may read `video_path` files from (resolved; symlinks
            out of them are refused). Empty (the default): path mode is off (403).
        max_concurrent_requests: requests handled at once; more answer 503 with Retry-After.
        max_inflight_body_bytes: bytes of request bodies held at once (from Content-Length),
            summed over the requests in flight; more answer 503 with Retry-After.
        batch_window_ms: how long a backend batch waits for more items from other requests.
        max_batch_window_ms: the adaptive window's cap, after a batch's first item, while
            recent bursts were bigger; <= `batch_window_ms`: off.
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
    limits = RequestLimits(
        max_body_bytes,
        max_frames,
        max_image_side,
        max_video_frames,
        max_request_pixels,
        max_nframes,
        max_video_pixels,
        max_video_decode_pixels,
        max_text_chars,
        max_body_nodes,
        max_body_depth,
        max_image_decode_bytes,
        max_image_tokens,
        max_new_tokens,
        max_form_parts,
    )
    state = ServiceState.build(
        backend, limits, video_dirs, batch_window_ms, max_batch_window_ms, max_batch
    )
    app = _new_app(backend.name, enable_faults)
    app.state.service, app.state.backend, app.state.metrics = state, backend, state.metrics
    app.state.batcher, app.state.faults = state.batcher, None
    install_error_handlers(app, pickle_routes.pickle_paths(pickle_at_root))
    pickle_router = pickle_routes.build_router(pickle_at_root)
    routers = (service_routes.router, critic_routes.router, video_routes.router, pickle_router)
    routers += (robometer_routes.router,)  # Robometer's /evaluate_batch(_npy) clients
    routers += (chat_routes.router,)  # OpenAI-style chat: RLinf's API reward worker
    for router in routers:
        app.include_router(router)
    # Middlewares, innermost first: faults, body limit, auth, hosts, concurrency, metrics.
    if enable_faults:  # tests and drills only: the module is not even imported otherwise
        from evolve_envs.reward.service.middleware import faults

        faults.install(app)  # admin routes + the innermost middleware
    routes = [*app.routes, *(route for router in routers for route in router.routes)]
    known_routes = {route.path for route in routes if hasattr(route, "path")}
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=max_body_bytes,
        max_inflight_bytes=max_inflight_body_bytes,
    )
    if token:
        add_bearer_auth(app, token)
    app.add_middleware(HostAllowListMiddleware, allowed_hosts=tuple(allowed_hosts))
    app.add_middleware(ConcurrencyLimitMiddleware, limit=max_concurrent_requests)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics, known_routes=known_routes)
    app.add_middleware(ModelHeadersMiddleware, headers=model_headers(backend))
    return app
