"""The reward service's own routes, whatever the backend: `GET /health`, `GET /capabilities`
and `GET /metrics` (Prometheus text when `Accept` asks for it, JSON otherwise).

Example:
    >>> sorted(route.path for route in router.routes)
    ['/capabilities', '/health', '/metrics']
"""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from fastapi.responses import Response

from evolve_envs.reward.protocol.wire import Capabilities, HealthResponse
from evolve_envs.reward.service.state.metrics import PROMETHEUS_CONTENT_TYPE, wants_prometheus
from evolve_envs.reward.service.state.service_state import State

__all__ = ["router"]

router = APIRouter(tags=["service"])


@router.get("/health", response_model=HealthResponse)
async def health(state: State) -> HealthResponse:
    """Liveness: the server is up and its backend loaded."""
    return HealthResponse(backend=state.backend.name)


@router.get("/capabilities", response_model=Capabilities)
async def capabilities(state: State) -> Capabilities:
    """Which routes the backend can serve (the others answer 501)."""
    return state.backend.capabilities()


@router.get("/metrics", response_model=None)
async def get_metrics(request: Request, state: State) -> Response | dict[str, object]:
    """Request counts, errors, backend batch sizes and latency percentiles (ms), as JSON;
    in Prometheus' text format when `Accept` asks for text/plain or OpenMetrics."""
    if wants_prometheus(request.headers.get("accept")):
        return Response(state.metrics.prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)
    snap = state.metrics.snapshot()
    snap["backend"] = state.backend.name
    snap["batch_window_ms"] = state.batch_window_ms
    snap["max_batch_window_ms"] = state.max_batch_window_ms
    snap["max_batch"] = state.max_batch
    snap["process"] = {
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    return snap
