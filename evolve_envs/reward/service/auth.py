"""Bearer-token authentication of the reward service, on Starlette's `AuthenticationMiddleware`.

`add_bearer_auth(app, token)` makes every request need `Authorization: Bearer <token>`; a
missing or wrong token answers `401` JSON with `WWW-Authenticate: Bearer` before the request
reaches any route (or has its body read).

Example:
    >>> from fastapi import FastAPI
    >>> from fastapi.testclient import TestClient
    >>> app = FastAPI()
    >>> add_bearer_auth(app, "s3cret")
    >>> with TestClient(app) as client:
    ...     resp = client.get("/anything")
    >>> resp.status_code, resp.json(), resp.headers["www-authenticate"]
    (401, {'error': 'missing bearer token'}, 'Bearer')
"""

from __future__ import annotations

import hmac

from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import Response

from evolve_envs.reward.service.errors import json_error

__all__ = ["BearerTokenBackend", "add_bearer_auth"]


class BearerTokenBackend(AuthenticationBackend):
    """Accepts a request whose `Authorization` header is exactly `Bearer <token>` (compared in
    constant time); raises `AuthenticationError` otherwise.

    Example:
        >>> BearerTokenBackend("s3cret").expected
        b'Bearer s3cret'
    """

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("token must not be empty")
        self.expected = f"Bearer {token}".encode()

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser]:
        header = dict(conn.scope["headers"]).get(b"authorization")
        if header is None:
            raise AuthenticationError("missing bearer token")
        if not hmac.compare_digest(header, self.expected):
            raise AuthenticationError("invalid bearer token")
        return AuthCredentials(["authenticated"]), SimpleUser("bearer")


def _unauthorized(conn: HTTPConnection, exc: Exception) -> Response:
    response = json_error(401, str(exc))
    response.headers["www-authenticate"] = "Bearer"
    return response


def add_bearer_auth(app: Starlette, token: str) -> None:
    """Require `Authorization: Bearer <token>` on every request to `app` (else 401 JSON)."""
    app.add_middleware(
        AuthenticationMiddleware, backend=BearerTokenBackend(token), on_error=_unauthorized
    )
