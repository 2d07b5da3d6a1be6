"""Opt-in fault injection for client tests and failure drills: `POST/GET/DELETE /admin/faults`
(modes in docs/reward-service.md, "Fault injection"); off unless `--enable-fault-injection`.

Example:
    >>> FaultSpec(mode="status", status=503, count=2).count
    2
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import struct
import threading
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evolve_envs.reward.protocol.pickle_codec import safe_pickle_loads
from evolve_envs.reward.protocol.pickle_types import UnsafePickleError

log = logging.getLogger("evolve_envs.reward.service")

__all__ = [
    "ADMIN_PREFIX",
    "TRANSPORT_SCOPE_KEY",
    "FaultSpec",
    "FaultInjector",
    "FaultMiddleware",
    "FaultableApp",
    "install",
]

ADMIN_PREFIX = "/admin/"
TRANSPORT_SCOPE_KEY = "evolve_envs.reward.service.transport"

_NUMERIC_KEYS = ("value_list", "critic_list", "critic", "prob", "score", "scores")
_INVALID_BODY = b"<html><body>upstream error: this is not JSON</body></html>"


class FaultSpec(BaseModel):
    """Body of `POST /admin/faults` (only when the server runs with fault injection enabled).

    See this module's docstring for the meaning of each mode.
    """

    model_config = ConfigDict(extra="ignore")

    mode: Literal["status", "delay", "invalid_json", "wrong_length", "nan", "inf", "huge", "reset"]
    status: int = Field(default=503, ge=100, le=599)
    delay_s: float = Field(default=2.0, ge=0.0, le=600.0)
    count: int | None = Field(default=None, ge=1)
    routes: list[str] | None = None


class FaultInjector:
    """Holds the armed fault (thread-safe) and decides which requests it hits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spec: FaultSpec | None = None
        self._remaining: int | None = None
        self._injected = 0

    def arm(self, spec: FaultSpec) -> dict[str, object]:
        with self._lock:
            self._spec = spec
            self._remaining = spec.count
        return self.status()

    def clear(self) -> dict[str, object]:
        with self._lock:
            self._spec = None
            self._remaining = None
        return self.status()

    def status(self) -> dict[str, object]:
        with self._lock:
            return {
                "active": None if self._spec is None else self._spec.model_dump(),
                "remaining": self._remaining,
                "injected": self._injected,
            }

    def take(self, path: str) -> FaultSpec | None:
        """The fault to apply to a request for `path`, consuming one count; None if none."""
        if path.startswith(ADMIN_PREFIX):
            return None
        with self._lock:
            spec = self._spec
            if spec is None:
                return None
            if spec.routes is not None and path not in spec.routes:
                return None
            if self._remaining is not None:
                self._remaining -= 1
                if self._remaining <= 0:
                    self._spec = None
                    self._remaining = None
            self._injected += 1
            return spec


def _mangle_numbers(obj: object, value: float) -> object:
    if isinstance(obj, dict):
        out = dict(obj)
        for key in _NUMERIC_KEYS:
            if key in out:
                cur = out[key]
                if isinstance(cur, list):
                    out[key] = [value for _ in cur] or [value]
                elif isinstance(cur, (int, float)) and not isinstance(cur, bool):
                    out[key] = value
        return out
    return obj


def _wrong_length(obj: object) -> object:
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    if isinstance(out.get("value_list"), list):
        out["value_list"] = out["value_list"][:-1]
    if isinstance(out.get("scores"), list):
        out["scores"] = out["scores"] + [out["scores"][-1] if out["scores"] else 0.0]
    for key in ("critic", "prob", "score"):
        if isinstance(out.get(key), (int, float)) and not isinstance(out.get(key), bool):
            out[key] = [out[key], out[key]]
    return out


def _rewrite_body(body: bytes, content_type: str, mode: str) -> bytes:
    """Apply a payload-mangling mode to a successful answer (JSON or pickle)."""
    is_pickle = "json" not in content_type
    try:
        obj = safe_pickle_loads(body) if is_pickle else json.loads(body)
    except (UnsafePickleError, ValueError):
        return body
    if mode == "wrong_length":
        obj = _wrong_length(obj)
    elif mode == "nan":
        obj = _mangle_numbers(obj, math.nan)
    elif mode == "inf":
        obj = _mangle_numbers(obj, math.inf)
    elif mode == "huge":
        obj = _mangle_numbers(obj, 1e308)
    if is_pickle:
        import pickle

        return pickle.dumps(obj, protocol=4)
    return json.dumps(obj, allow_nan=True).encode()


async def _send_json(send: Send, status: int, payload: dict[str, object]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class FaultMiddleware:
    """ASGI middleware applying the armed fault of a `FaultInjector` to matching requests."""

    def __init__(self, app: ASGIApp, injector: FaultInjector) -> None:
        self.app = app
        self.injector = injector

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        spec = self.injector.take(scope["path"])
        if spec is None:
            await self.app(scope, receive, send)
            return
        mode = spec.mode
        if mode == "status":
            await _send_json(
                send,
                spec.status,
                {"error": f"injected fault: HTTP {spec.status}", "fault": "status"},
            )
        elif mode == "delay":
            await asyncio.sleep(spec.delay_s)
            await self.app(scope, receive, send)
        elif mode == "invalid_json":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(_INVALID_BODY)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _INVALID_BODY})
        elif mode == "reset":
            await self._reset(scope, send)
        else:
            await self._rewrite(scope, receive, send, mode)

    async def _rewrite(self, scope: Scope, receive: Receive, send: Send, mode: str) -> None:
        start: Message = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        body = b"".join(chunks)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        content_type = next((v.decode() for k, v in headers if k.lower() == b"content-type"), "")
        if start.get("status") == 200:
            body = _rewrite_body(body, content_type, mode)
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _reset(self, scope: Scope, send: Send) -> None:
        transport = scope.get(TRANSPORT_SCOPE_KEY)
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            transport.abort()
            # Let the server notice the lost connection before this request ends.
            for _ in range(3):
                await asyncio.sleep(0)
            return
        # No transport available (another ASGI server): start a response and never finish it,
        # which makes the server close the connection mid-response.
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"1000")],
            }
        )


class FaultableApp(FastAPI):
    """The app class with fault injection: it remembers each connection's transport (for the
    `reset` fault). `create_app(enable_faults=True)` uses it; production apps are plain FastAPI."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http":
            transport = getattr(getattr(send, "__self__", None), "transport", None)
            if transport is not None:
                scope[TRANSPORT_SCOPE_KEY] = transport
        await super().__call__(scope, receive, send)


def install(app: FastAPI) -> FaultInjector:
    """Add the admin routes and the fault middleware to `app` (call before its other
    middlewares, so faults act innermost); the injector is also at `app.state.faults`."""
    injector = FaultInjector()
    app.state.faults = injector

    @app.get("/admin/faults", tags=["admin"])
    async def fault_status() -> dict[str, object]:
        """The armed fault, how many requests it still affects, how many it hit."""
        return injector.status()

    @app.post("/admin/faults", tags=["admin"])
    async def arm_fault(spec: FaultSpec) -> dict[str, object]:
        """Arm a fault (see this module's docstring); replaces any armed fault."""
        log.warning("fault injection armed: %s", spec.model_dump())
        return injector.arm(spec)

    @app.delete("/admin/faults", tags=["admin"])
    async def clear_faults() -> dict[str, object]:
        """Clear the armed fault."""
        return injector.clear()

    app.add_middleware(FaultMiddleware, injector=injector)
    return injector
