"""The start-up check of a reward service: reachable, authorised, speaking our protocol.

Every stack that talks to a reward service (the Gymnasium stack built by
``evolve_envs.stack.factory.make_env`` and the RLinf integration) calls :func:`check_service` once,
at construction, so that a dead or refusing service is found before the first episode instead
of silently turning every reward into a fallback value.

``GET /capabilities`` is sent through the endpoint pool (its token, timeouts and call budget
apply). The causes it tells apart:

* unreachable (connection refused, DNS, timeout, every endpoint down);
* refused: HTTP 401/403 (a missing or wrong bearer token: ``reward_model.token`` /
  ``EVOLVE_REWARD_TOKEN``);
* wrong protocol: a 404 or an answer that is not a capabilities document (a server that is not
  a reward service of this project). With ``need_capabilities=False`` (episode scorers, whose
  third-party services may not serve ``/capabilities``) a 404 is accepted: the server answered
  and did not refuse the token;
* any other error status.

``require=True`` (the default, ``reward_model.require_service: true``) raises
:class:`ServiceUnavailableError` naming the endpoint and the cause; ``require=False`` logs a
warning saying that rewards will be fallback values until the service answers, and returns
``None``.

Example:
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
    """The reward service failed the start-up check (unreachable, refusing, or not ours).

    ``reason`` is one of ``"unreachable"``, ``"unauthorized"``, ``"wrong_protocol"``,
    ``"error"``.

    Example:
        >>> err = ServiceUnavailableError(
        ...     "http://127.0.0.1:8111", "/capabilities", "HTTP 401", reason="unauthorized"
        ... )
        >>> err.reason, err.endpoint
        ('unauthorized', 'http://127.0.0.1:8111')
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
    """Ask the service for ``/capabilities`` once and apply the start-up failure policy.

    Args:
        pool: the endpoint pool the clients will use (same token, timeouts, budget).
        require: raise :class:`ServiceUnavailableError` on failure (else warn, return ``None``).
        need_capabilities: a 404 / non-capabilities answer is a failure ("wrong protocol").
            ``False`` accepts them (the server answered and accepted the token).
        what: how messages name the service.
        option: where the user gave the service's address (the unreachable hint names it).

    Returns:
        The service's :class:`~evolve_envs.reward.protocol.wire.Capabilities`, or ``None`` when they
        could not be read (soft mode, or an accepted 404).
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
