"""How a pool reaches the reward service: the typed values its HTTP calls use.

A ``reward_model`` block becomes one :class:`PoolSettings` (the stack builds it), and
:func:`open_pool` turns it into the pool the clients send through: an
:class:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool` over HTTP, or a
:class:`~evolve_envs.reward.clients.ray_handle_pool.RayHandlePool` for ``ray://<app>``.

>>> settings = PoolSettings(timeout=30.0, max_retries=1, total_timeout=60.0, token="s3cret")
>>> "s3cret" in repr(settings)  # the token is never printed
False
>>> with open_pool(["http://127.0.0.1:8111"], settings) as pool:
...     pool.timeout, pool.total_timeout, pool.max_retries
(30.0, 60.0, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.failover_transport import DEFAULT_MAX_IN_FLIGHT
from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool, is_ray_endpoint

__all__ = ["PoolSettings", "RewardPool", "open_pool"]

#: What the clients send through: HTTP replicas, or a Ray Serve application's handle.
RewardPool = EndpointPool | RayHandlePool


@dataclass(frozen=True)
class PoolSettings:
    """Per-attempt ``timeout``, extra attempts ``max_retries``, the call's whole budget
    ``total_timeout``, the most requests in flight per endpoint ``max_in_flight`` (HTTP only),
    the bearer ``token`` (``None``: ``$EVOLVE_REWARD_TOKEN``) and the first health route."""

    timeout: float = 120.0
    max_retries: int = 2
    total_timeout: float | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    token: str | None = field(default=None, repr=False)
    health_route: str = "/health"


def open_pool(urls: Sequence[str], settings: PoolSettings) -> RewardPool:
    """A new pool on ``urls`` with ``settings``; the caller owns it and closes it."""
    if is_ray_endpoint(list(urls)):
        return RayHandlePool(
            urls[0],
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            total_timeout=settings.total_timeout,
            token=settings.token,
        )
    return EndpointPool(
        urls,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        token=settings.token,
        total_timeout=settings.total_timeout,
        health_route=settings.health_route,
        max_in_flight=settings.max_in_flight,
    )
