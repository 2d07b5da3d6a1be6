"""The `Host`/`Origin` allow-list (against DNS rebinding): 421 JSON for a foreign `Host`, 403 for a
foreign `Origin`.

Example:
    >>> guard = HostAllowListMiddleware(app=None, allowed_hosts=DEFAULT_ALLOWED_HOSTS)
    >>> guard.allowed("127.0.0.1:8111"), guard.allowed("attacker.example")
    (True, False)
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from evolve_envs.reward.service.errors import json_error

__all__ = ["DEFAULT_ALLOWED_HOSTS", "HostAllowListMiddleware", "host_name"]

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")  # server.LOOPBACK_HOSTS


def host_name(value: str) -> str:
    """The host part of a Host header or an Origin's authority, lower-case, without the port."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8111
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostAllowListMiddleware:
    """ASGI middleware: a `Host` outside `allowed_hosts` answers 421, a foreign `Origin` 403 (`"*"`
    allows any).
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allow_any = "*" in allowed_hosts
        self.hosts = {host_name(h) for h in allowed_hosts}

    def allowed(self, host: str) -> bool:
        """Whether a `Host` value (or an Origin's authority) is served."""
        return self.allow_any or host_name(host) in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        response = None
        if not self.allowed(host):
            response = json_error(
                421, f"host {host[:100]!r} is not served here (see --allowed-hosts)"
            )
        elif origin is not None and origin != b"null":
            authority = origin.decode("latin-1").split("://", 1)[-1]
            if not self.allowed(authority):
                response = json_error(403, "cross-origin requests are not accepted")
        elif origin == b"null":
            response = json_error(403, "cross-origin requests are not accepted")
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
