"""Bearer-token authentication (401 JSON before any route) and the closed-by-default rule
(`check_exposure`: no token on a non-loopback address unless `--insecure-no-token`).

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
import os
import re
from collections.abc import Mapping

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

from evolve_envs.reward.protocol.token import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    TokenError,
)
from evolve_envs.reward.service.errors import json_error

__all__ = [
    "check_policy_bind",
    "BearerTokenBackend",
    "add_bearer_auth",
    "is_loopback_host",
    "check_exposure",
    "expand_env_refs",
]

#: a backend argument that is a whole `${NAME}` reference to an environment variable
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class BearerTokenBackend(AuthenticationBackend):
    """Accepts exactly `Authorization: Bearer <token>` (constant-time compare), else raises."""

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


def is_loopback_host(host: str) -> bool:
    """Whether a bind address reaches this machine only (``127.0.0.0/8``, ``::1``, ``localhost``).

    Example:
        >>> [is_loopback_host(h) for h in ("127.0.0.1", "localhost", "[::1]", "0.0.0.0", "node-1")]
        [True, True, True, False, False]
    """
    import ipaddress

    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(
    host: str | None,
    token: str | None,
    insecure_no_token: bool,
    *,
    what: str = "--host",
    fix: str = (
        f"give --token-file PATH or set {TOKEN_ENV} or {TOKEN_FILE_ENV}, or add "
        "--insecure-no-token on a network you trust"
    ),
) -> None:
    """Refuse (`TokenError`) a non-loopback (or unknown, `None`) address without a token, unless
    ``insecure_no_token``.

    Example:
        >>> check_exposure("127.0.0.1", None, False)  # loopback: no token needed
        >>> check_exposure("0.0.0.0", None, False)
        Traceback (most recent call last):
        ...
        evolve_envs.reward.protocol.token.TokenError: --host 0.0.0.0 is not a loopback address ...
    """
    if token or insecure_no_token or (host is not None and is_loopback_host(host)):
        return
    where = f"{what} {host}" if host is not None else f"{what} (address unknown)"
    raise TokenError(
        f"{where} is not a loopback address and no bearer token is set: anyone who can reach "
        "the port could use the model (the Host allow-list is no access control, a remote "
        f"caller chooses its Host header); {fix}"
    )


def expand_env_refs(value: object, *, environ: Mapping[str, str] | None = None) -> object:
    """``value`` with every string exactly ``${NAME}`` (nested too) replaced by that variable; unset
    raises `TokenError`.

    Example:
        >>> expand_env_refs({"api_key": "${JUDGE_KEY}", "model": "m"}, environ={"JUDGE_KEY": "k"})
        {'api_key': 'k', 'model': 'm'}
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):
        ref = _ENV_REF.fullmatch(value)
        if ref is None:
            return value
        if ref.group(1) not in env:
            raise TokenError(
                f"backend argument {value} names the environment variable {ref.group(1)}, "
                "which is not set; export it (or write the value in --backend-kwargs-file)"
            )
        return env[ref.group(1)]
    if isinstance(value, dict):
        return {k: expand_env_refs(v, environ=env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env_refs(v, environ=env) for v in value]
    return value


def check_policy_bind(host: str, environ: Mapping[str, str]) -> None:
    """Refuse (`TokenError`) a `--no-token-behind-network-policy` bind outside a pod or on a public
    address (a NetworkPolicy guards pod addresses only).

    Example:
        >>> check_policy_bind("0.0.0.0", {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    """
    import ipaddress

    flag = "--no-token-behind-network-policy"
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        raise TokenError(
            f"{flag}: not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset), so no "
            "NetworkPolicy guards this port; give a token, or --insecure-no-token on a network "
            "you trust"
        )
    name = host.strip().strip("[]")
    if name in ("0.0.0.0", "::", ""):
        return
    try:
        private = ipaddress.ip_address(name).is_private
    except ValueError:
        private = False
    if not private:
        raise TokenError(
            f"{flag}: --host {host} is not a private address; a NetworkPolicy guards pod "
            "addresses only: bind 0.0.0.0 or the pod's IP, or give a token"
        )
