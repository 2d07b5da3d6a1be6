"""Bearer-token authentication of the reward service, on Starlette's `AuthenticationMiddleware`,
and the rules for where the token comes from and when one is required.

`add_bearer_auth(app, token)` makes every request need `Authorization: Bearer <token>`; a
missing or wrong token answers `401` JSON with `WWW-Authenticate: Bearer` before the request
reaches any route (or has its body read).

`resolve_token` reads the token from a value, a file (`--token-file`, e.g. a Kubernetes Secret
mounted as a file) or the environment (`EVOLVE_REWARD_TOKEN`, `EVOLVE_REWARD_TOKEN_FILE`), so it
never needs to be on a command line. `check_exposure` is the closed-by-default rule every way of
starting the service applies: a non-loopback address without a token is refused unless the
operator says `--insecure-no-token` (the `Host` allow-list is no access control: a remote
caller chooses its own `Host` header).

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
from pathlib import Path

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

__all__ = [
    "BearerTokenBackend",
    "add_bearer_auth",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "TokenError",
    "read_token_file",
    "resolve_token",
    "is_loopback_host",
    "check_exposure",
    "expand_env_refs",
]

#: the environment variable that holds the bearer token (server, launcher, Serve replicas, clients)
TOKEN_ENV = "EVOLVE_REWARD_TOKEN"
#: the environment variable that names a file holding the bearer token (server, launcher, Serve)
TOKEN_FILE_ENV = "EVOLVE_REWARD_TOKEN_FILE"
#: the most a token file may hold: a token, not a document
MAX_TOKEN_FILE_BYTES = 4096
#: what a token may be made of: visible ASCII, no spaces (it travels in an HTTP header)
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")
#: a backend argument that is a whole `${NAME}` reference to an environment variable
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class TokenError(ValueError):
    """A token source that cannot be used, or a public address without a token; the message is
    one line naming the cause and the fix.

    >>> str(TokenError("token file 'x' is empty; write the token into it"))
    "token file 'x' is empty; write the token into it"
    """


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


def _checked(token: str, source: str) -> str:
    if not _TOKEN_CHARS.fullmatch(token):
        raise TokenError(
            f"the bearer token from {source} holds spaces, control or non-ASCII characters; "
            "use visible ASCII only (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)"
        )
    return token


def read_token_file(path: str | os.PathLike[str], *, source: str = "--token-file") -> str:
    """The token a file holds (surrounding whitespace and a final newline dropped).

    An unreadable, empty, over-long (> 4 KiB) or multi-word file raises `TokenError`.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
        ...     _ = f.write("s3cret\\n")
        >>> read_token_file(f.name)
        's3cret'
    """
    where = f"{source} {str(path)!r}"
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenError(
            f"{where}: cannot read it ({exc.strerror or exc}); give a readable file that holds "
            "the token"
        ) from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise TokenError(
            f"{where} holds more than {MAX_TOKEN_FILE_BYTES} bytes; a token file holds the "
            "token alone"
        )
    token = raw.decode("ascii", errors="replace").strip()
    if not token:
        raise TokenError(f"{where} is empty; write the token into it")
    return _checked(token, where)


def resolve_token(
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    names: tuple[str, str] = ("--token", "--token-file"),
) -> str | None:
    """The bearer token, from the first source that is set: ``token`` (a value), ``token_file``
    (a file holding it), ``$EVOLVE_REWARD_TOKEN``, ``$EVOLVE_REWARD_TOKEN_FILE``; ``None`` when
    none is. ``names`` are the option names errors use (``token``/``token_file`` in a Serve
    config). Both ``token`` and ``token_file`` given is an error (`TokenError`).

    Example:
        >>> resolve_token(environ={"EVOLVE_REWARD_TOKEN": "s3cret"})
        's3cret'
        >>> resolve_token("abc", environ={"EVOLVE_REWARD_TOKEN": "s3cret"})
        'abc'
        >>> resolve_token(environ={}) is None
        True
    """
    env = os.environ if environ is None else environ
    if token and token_file:
        raise TokenError(f"both {names[0]} and {names[1]} are given; give one of them")
    if token:
        return _checked(token, names[0])
    if token_file:
        return read_token_file(token_file, source=names[1])
    if env.get(TOKEN_ENV):
        return _checked(env[TOKEN_ENV], f"${TOKEN_ENV}")
    if env.get(TOKEN_FILE_ENV):
        return read_token_file(env[TOKEN_FILE_ENV], source=f"${TOKEN_FILE_ENV}")
    return None


def is_loopback_host(host: str) -> bool:
    """Whether a bind address reaches this machine only (``127.0.0.0/8``, ``::1``,
    ``localhost``). ``0.0.0.0``, ``::``, ``""`` and any other name are not.

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
    """Refuse (`TokenError`, one line) to serve a non-loopback address without a bearer token,
    unless ``insecure_no_token`` says so. ``host`` ``None`` means the address is unknown, which
    counts as public.

    Example:
        >>> check_exposure("127.0.0.1", None, False)  # loopback: no token needed
        >>> check_exposure("0.0.0.0", "s3cret", False)  # a token: fine
        >>> check_exposure("0.0.0.0", None, True)  # the operator said so
        >>> check_exposure("0.0.0.0", None, False)
        Traceback (most recent call last):
        ...
        evolve_envs.reward.service.auth.TokenError: --host 0.0.0.0 is not a loopback address ...
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
    """``value`` with every string that is exactly ``${NAME}`` replaced by the environment
    variable ``NAME`` (in nested dicts and lists too), so backend secrets (an API key in
    ``--backend-kwargs``) need not be written out. An unset variable raises `TokenError`.

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
