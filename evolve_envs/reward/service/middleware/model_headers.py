"""`ModelHeadersMiddleware`: every 2xx answer names its model (`X-Reward-Backend`,
`X-Reward-Model`, `X-Reward-Model-Revision`, `X-Reward-Config-Hash`); error answers carry none.

Example:
    >>> from evolve_envs.reward.service.backends import make_backend
    >>> model_headers(make_backend("mock", rule="change", model_id="m1"))[:2]
    [(b'x-reward-backend', b'mock'), (b'x-reward-model', b'm1')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from evolve_envs.reward.service.backends.base import Backend

__all__ = [
    "HEADER_BACKEND",
    "HEADER_MODEL",
    "HEADER_REVISION",
    "HEADER_CONFIG",
    "model_headers",
    "ModelHeadersMiddleware",
]

HEADER_BACKEND = "x-reward-backend"
HEADER_MODEL = "x-reward-model"
HEADER_REVISION = "x-reward-model-revision"
HEADER_CONFIG = "x-reward-config-hash"


def _header_value(text: str) -> bytes:
    """A header-safe value: printable ASCII, at most 200 characters."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text[:200]).encode("ascii")


def model_headers(backend: Backend) -> list[tuple[bytes, bytes]]:
    """The identity headers of `backend` (see module docs), from its `/capabilities` answer."""
    caps = backend.capabilities()
    pairs = [
        (HEADER_BACKEND, caps.backend),
        (HEADER_MODEL, caps.model_id or caps.backend),
        (HEADER_REVISION, caps.model_revision),
        (HEADER_CONFIG, caps.config_hash),
    ]
    return [(k.encode(), _header_value(v)) for k, v in pairs if v]


class ModelHeadersMiddleware:
    """ASGI middleware adding `headers` (`model_headers(backend)`) to every 2xx HTTP response."""

    def __init__(self, app: ASGIApp, headers: list[tuple[bytes, bytes]]) -> None:
        self.app = app
        self.headers = list(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
