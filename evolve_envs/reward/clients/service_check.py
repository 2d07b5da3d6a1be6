"""The start-up check of a reward service: reachable, authorised, speaking our protocol.

Every stack calls :func:`check_service` once, at construction: ``GET /capabilities`` through the
pool tells unreachable, refused (401/403: the token), wrong protocol (404 or not a capabilities
document) and other errors apart, so a dead service is found before the first episode.

>>> from evolve_envs.reward.clients.endpoint_pool import EndpointPool
>>> pool = EndpointPool("http://127.0.0.1:9", connect_timeout=0.5, total_timeout=1.0)
>>> check_service(pool, require=False) is None  # port 9 refuses: warning, no capabilities
True
>>> pool.close()
"""

from __future__ import annotations

import logging

from evolve_envs.reward.clients.client_base import parse_json_model
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.protocol.wire import Capabilities

__all__ = ["ServiceUnavailableError", "check_service", "ROUTE_CAPABILITIES"]

logger = logging.getLogger("evolve_envs.reward.clients")

ROUTE_CAPABILITIES = "/capabilities"


class ServiceUnavailableError(RewardServiceError):
    """The reward service failed the start-up check; ``reason``: ``"unreachable"``,
    ``"unauthorized"``, ``"wrong_protocol"`` or ``"error"``.
    """

    def __init__(self, endpoint: str | None, route: str, cause: str, *, reason: str, **kw) -> None:
        super().__init__(endpoint, route, cause, **kw)
        self.reason = reason

    def __reduce__(self):
        return (
            _rebuild,
            (self.endpoint, self.route, self.cause, self.reason, self.kind, self.status_code),
        )


def _rebuild(endpoint, route, cause, reason, kind, status_code) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        endpoint, route, cause, reason=reason, kind=kind, status_code=status_code
    )


_HINTS = {
    "unreachable": "is the service running and reachable from here? ({option})",
    "unauthorized": "the service requires a bearer token: set reward_model.token or "
    "EVOLVE_REWARD_TOKEN to the token it was started with",
    "wrong_protocol": "the server there does not speak the reward service protocol "
    "(GET /capabilities); check the endpoint's host and port",
    "error": "the service answered with an error",
}


def _classify(err: RewardServiceError, need_capabilities: bool) -> str | None:
    """The reason of a failed check, or ``None`` when the failure is acceptable."""
    if err.kind == ErrorKind.HTTP_STATUS:
        if err.status_code in (401, 403):
            return "unauthorized"
        if err.status_code in (404, 405):
            return "wrong_protocol" if need_capabilities else None
        return "error"
    if err.kind == ErrorKind.INVALID_RESPONSE:
        return "wrong_protocol" if need_capabilities else None
    return "unreachable"


def log_identity(endpoint: str, caps: Capabilities, what: str = "reward service") -> None:
    """Log, once at start-up, which backend and model answer at `endpoint`."""
    logger.info(
        "%s at %s: backend %s, model %s, revision %s, config %s",
        what,
        endpoint,
        caps.backend,
        caps.model_id or "(not reported)",
        caps.model_revision or "(not reported)",
        caps.config_hash or "(not reported)",
    )


def check_service(
    pool: EndpointPool,
    *,
    require: bool = True,
    need_capabilities: bool = True,
    what: str = "reward service",
    option: str = "reward_model.endpoint / VLAC_SERVICE_URL",
) -> Capabilities | None:
    """Ask for ``/capabilities`` once: the capabilities, or ``None`` when they could not be read.

    ``require``: raise :class:`ServiceUnavailableError` on failure (else warn and return ``None``);
    ``need_capabilities=False`` accepts a 404 (a third-party scorer that answered, took the token);
    ``what`` and ``option`` name the service and where its address was given, in the messages.
    """
    try:
        reply = pool.request("GET", ROUTE_CAPABILITIES)
        caps = parse_json_model(reply, ROUTE_CAPABILITIES, Capabilities)
        watch = getattr(pool, "model_watch", None)
        if watch is not None:
            watch.expect(reply.endpoint, caps)
            log_identity(reply.endpoint, caps, what)
        return caps
    except RewardServiceError as err:
        reason = _classify(err, need_capabilities)
        if reason is None:
            return None
        hint = _HINTS[reason].format(option=option)
        cause = f"{what} failed the start-up check ({reason}): {err.cause}; {hint}"
        if require:
            raise ServiceUnavailableError(
                err.endpoint,
                ROUTE_CAPABILITIES,
                cause,
                reason=reason,
                kind=err.kind,
                status_code=err.status_code,
                attempts=err.attempts,
            ) from None
        logger.warning(
            "%s at %s: %s. require_service is false: rewards are fallback values until it answers",
            what,
            err.endpoint or ", ".join(pool.urls),
            cause,
        )
        return None
