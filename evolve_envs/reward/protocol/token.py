"""Where a bearer token comes from, for both ends: a value, a file, ``$EVOLVE_REWARD_TOKEN`` or
``$EVOLVE_REWARD_TOKEN_FILE`` (never the command line, where ``ps`` shows it).

>>> resolve_token(environ={"EVOLVE_REWARD_TOKEN": "s3cret"})
's3cret'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "TokenError",
    "read_token_file",
    "resolve_token",
]

#: the environment variable that holds the bearer token (server, launcher, Serve replicas, clients)
TOKEN_ENV = "EVOLVE_REWARD_TOKEN"
#: the environment variable that names a file holding the bearer token (server, launcher, Serve)
TOKEN_FILE_ENV = "EVOLVE_REWARD_TOKEN_FILE"
#: the most a token file may hold: a token, not a document
MAX_TOKEN_FILE_BYTES = 4096
#: what a token may be made of: visible ASCII, no spaces (it travels in an HTTP header)
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


class TokenError(ValueError):
    """A token source that cannot be used, or a public address without a token (one-line
    message)."""


def _checked(token: str, source: str) -> str:
    if not _TOKEN_CHARS.fullmatch(token):
        raise TokenError(
            f"the bearer token from {source} holds spaces, control or non-ASCII characters; "
            "use visible ASCII only (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)"
        )
    return token


def read_token_file(path: str | os.PathLike[str], *, source: str = "--token-file") -> str:
    """The token a file holds; an unreadable, empty, over-long (> 4 KiB) or multi-word file
    raises."""
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
    """The bearer token from the first source set: ``token``, ``token_file``, then the environment.

    ``names`` are the option names errors use; both ``token`` and ``token_file`` is a `TokenError`.
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
