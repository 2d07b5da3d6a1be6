"""The reward service as a Ray Serve application: the same FastAPI app on N replicas, over HTTP or
by handle (`RewardDeployment.call`); docs/scaling-out.md and docs/reward-service.md ("Ray Serve").

Example:
    >>> app = build_app({"backend": "mock", "replicas": 2})  # doctest: +SKIP
    >>> serve.run(app, name="reward", route_prefix="/")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx
from ray import serve
from ray.serve import Application

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV, resolve_token
from evolve_envs.reward.service.limits import APP_LIMITS, DEFAULT_LIMITS, ServiceLimits
from evolve_envs.reward.service.middleware.auth import (
    check_exposure,
    expand_env_refs,
    is_loopback_host,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["RewardDeployment", "build_app", "deployment_options", "DEFAULT_APP_NAME"]

DEFAULT_APP_NAME = "reward"

log = logging.getLogger("evolve_envs.reward.service.hosting.ray_serve")

#: Serve application arguments that say where the token comes from, read by each replica
TOKEN_KEYS = ("token_file", "insecure_no_token")
#: what a replica without a token on a public proxy says to do
SERVE_TOKEN_FIX = (
    f"set token_file in the application's args (a file on the replica's node, e.g. a mounted "
    f"Kubernetes Secret) or {TOKEN_ENV} / {TOKEN_FILE_ENV} in the replicas' environment, or "
    "insecure_no_token: true on a network you trust"
)

#: keyword arguments of `create_app` that the Serve config may set (besides the backend).
APP_KEYS = (
    *APP_LIMITS,
    "token",
    "video_dirs",
    "allowed_hosts",
    "batch_window_ms",
    "max_batch_window_ms",
    "max_batch",
    "enable_faults",
    "pickle_at_root",
)


@serve.ingress()
class RewardDeployment:
    """One replica: `backend` built with `backend_kwargs`, `create_app(**app_kwargs)`, a handle
    entry."""

    def __init__(
        self,
        backend: str,
        backend_kwargs: Mapping[str, object] | None = None,
        app_kwargs: Mapping[str, object] | None = None,
    ) -> None:
        from evolve_envs.reward.service.app import create_app

        app_kwargs = dict(app_kwargs or {})
        app_kwargs["token"] = replica_token(app_kwargs, proxy_host())
        backend_kwargs = expand_env_refs(dict(backend_kwargs or {}))
        self._app = create_app(backend, backend_kwargs=backend_kwargs, **app_kwargs)
        self._client: httpx.AsyncClient | None = None

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._app

    def _asgi_client(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = httpx.ASGITransport(app=self._app)
            self._client = httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            )  # in-process, a loopback name
        return self._client

    async def _one(self, call: tuple) -> tuple[int, dict[str, str], bytes]:
        method, route, body, content, headers = call
        resp = await self._asgi_client().request(
            method, route, json=body, content=content, headers=headers
        )
        return resp.status_code, dict(resp.headers), resp.content

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002, max_concurrent_batches=64)
    async def call(self, calls: list[tuple]) -> list[tuple[int, dict[str, str], bytes]]:
        """Answer `(method, route, json_body, content, headers)` calls with
        `(status, headers, body bytes)`."""
        return list(await asyncio.gather(*(self._one(c) for c in calls)))


def proxy_host() -> str | None:
    """The address Serve's HTTP proxies listen on (`http_options.host`), asked of the Serve
    controller; ``None`` when it cannot be read (then it counts as public)."""
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client(raise_if_no_controller_running=False)
        return None if client is None else str(client.http_config.host)
    except Exception:  # noqa: BLE001 - Ray's client API is internal; unknown counts as public
        log.warning("cannot read the Serve proxy's address; treating it as public")
        return None


def replica_token(app_kwargs: dict[str, object], host: str | None) -> str | None:
    """Pop the token arguments from ``app_kwargs``; the replica's token, read on its node.

    Raises `TokenError` when the proxy at ``host`` is public and there is none, unless
    ``insecure_no_token``.
    """
    token = resolve_token(
        app_kwargs.pop("token", None),
        app_kwargs.pop("token_file", None),
        names=("token", "token_file"),
    )
    insecure = bool(app_kwargs.pop("insecure_no_token", False))
    check_exposure(host, token, insecure, what="the Serve HTTP proxy", fix=SERVE_TOKEN_FIX)
    if token is None and not (host is not None and is_loopback_host(host)):
        log.warning(
            "serving the proxy at %s without a bearer token (insecure_no_token): anyone who "
            "can reach it can use the model",
            host,
        )
    return token


def deployment_options(
    *,
    replicas: int | None = 1,
    num_gpus: float = 0.0,
    num_cpus: float = 1.0,
    autoscaling: Mapping[str, object] | None = None,
    max_ongoing_requests: int = 64,
    max_queued_requests: int = DEFAULT_LIMITS["max_concurrent_requests"],
    resources: Mapping[str, float] | None = None,
) -> dict[str, object]:
    """`Deployment.options(...)` for `replicas` fixed replicas or an `autoscaling` config.

    `resources` are custom Ray resources per replica (`{"reward": 1}`: only nodes started with it).

    Example:
        >>> opts = deployment_options(replicas=2, resources={"reward": 1})
        >>> opts["max_ongoing_requests"], opts["max_queued_requests"]
        (64, 256)
    """
    for name, cap in (
        ("max_ongoing_requests", max_ongoing_requests),
        ("max_queued_requests", max_queued_requests),
    ):
        if int(cap) < 1:
            raise ValueError(f"{name} must be >= 1, got {cap}")
    actor: dict[str, object] = {"num_gpus": float(num_gpus), "num_cpus": float(num_cpus)}
    if resources:
        actor["resources"] = {str(k): float(v) for k, v in resources.items()}
    opts: dict[str, object] = {
        "ray_actor_options": actor,
        "max_ongoing_requests": int(max_ongoing_requests),
        "max_queued_requests": int(max_queued_requests),
    }
    if autoscaling:
        opts["autoscaling_config"] = dict(autoscaling)
        opts["num_replicas"] = "auto"
    else:
        if replicas is None or replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        opts["num_replicas"] = int(replicas)
    return opts


def build_app(args: Mapping[str, object]) -> Application:
    """Serve application builder (the `import_path` of `evolve_envs/configs/serve/*.yaml`).

    `args`: `backend` and, optionally, `backend_kwargs`, `replicas`, `num_gpus`, `num_cpus`,
    `resources`, `autoscaling`, `max_ongoing_requests`, `max_queued_requests`, any of `APP_KEYS`
    and `TOKEN_KEYS`.
    """
    args = dict(args)
    if "backend" not in args:
        raise ValueError("the Serve application needs a 'backend' argument")
    backend = args.pop("backend")
    backend_kwargs = args.pop("backend_kwargs", None) or {}
    app_kwargs = {k: args.pop(k) for k in (*APP_KEYS, *TOKEN_KEYS) if k in args}
    if app_kwargs.get("token") and app_kwargs.get("token_file"):
        raise ValueError("both token and token_file are given; give one of them")
    if not isinstance(app_kwargs.get("insecure_no_token", False), bool):
        raise ValueError("insecure_no_token must be true or false")
    limits = {k: app_kwargs.pop(k) for k in APP_LIMITS if k in app_kwargs}
    # the limits: the arguments, else EVOLVE_REWARD_<NAME> where the app is built, else defaults
    settings = ServiceLimits.from_env(**limits)
    app_kwargs.update(settings.app_kwargs())
    opts = deployment_options(
        replicas=args.pop("replicas", 1),
        num_gpus=args.pop("num_gpus", 0.0),
        num_cpus=args.pop("num_cpus", 1.0),
        autoscaling=args.pop("autoscaling", None),
        max_ongoing_requests=args.pop("max_ongoing_requests", 64),
        max_queued_requests=args.pop("max_queued_requests", settings.max_concurrent_requests),
        resources=args.pop("resources", None),
    )
    if args:
        raise ValueError(f"unknown Serve application arguments: {sorted(args)}")
    deployment = serve.deployment(RewardDeployment, name="RewardDeployment").options(**opts)
    return deployment.bind(backend, backend_kwargs, app_kwargs)
