"""Opening a reward model: one context manager for every stack (docs/ARCHITECTURE.md).

:func:`open_reward_model` opens, in order, the service (the block's endpoints, or an embedded
one), the endpoint pool, the client of the block's ``kind`` and the start-up ``/capabilities``
check, all on one ``ExitStack``: a failure closes what was opened, ``close`` undoes it in reverse.

>>> from evolve_envs.stack.loading import load_config
>>> rm = load_config({"reward_model": {"enable": True, "endpoint": "embedded"}}).reward_model
>>> with open_reward_model(rm) as model:
...     kind = type(model.client).__name__
>>> kind, model.service.is_running()
('ProgressClient', False)
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.reward.clients.pool_settings import PoolSettings, RewardPool, open_pool
from evolve_envs.reward.service.limits import CLIENT_THREADS, admission_for
from evolve_envs.stack.config import (
    PickleScorerConfig,
    ProgressModelConfig,
    RewardModelConfig,
    VideoScoreConfig,
)
from evolve_envs.stack.loading import load_config, reward_model_source

if TYPE_CHECKING:
    from evolve_envs.progress.tracker_config import TrackerConfig
    from evolve_envs.reward.clients.camera_average import CameraAverageClient
    from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
    from evolve_envs.reward.clients.progress_client import ProgressClient
    from evolve_envs.reward.clients.video_score_client import VideoScoreClient
    from evolve_envs.reward.protocol.wire import Capabilities
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    #: The client of a block's kind.
    RewardClient = ProgressClient | CameraAverageClient | VideoScoreClient | PickleScorerClient

__all__ = [
    "RewardModel",
    "open_reward_model",
    "shared_service",
    "start_embedded_service",
    "endpoint_pool",
    "reward_endpoints",
    "check_reward_service",
    "pool_settings",
]

logger = logging.getLogger(__name__)


def reward_endpoints(rm: RewardModelConfig, url: str | None = None) -> list[str]:
    """The service URLs of a ``reward_model`` block (``url`` replaces an ``embedded`` one)."""
    from evolve_envs.reward.clients.endpoint_urls import expand_endpoints

    if url is not None:
        return [url]
    from evolve_envs.reward.clients.ray_handle_pool import is_ray_endpoint

    if is_ray_endpoint(rm.endpoint):  # a Ray Serve application, reached by DeploymentHandle
        return [rm.endpoint if isinstance(rm.endpoint, str) else rm.endpoint[0]]
    try:
        return expand_endpoints(rm.endpoint, None, rm.service_num)
    except ValueError as exc:
        raise ConfigError(f"reward_model.endpoint: {exc}") from None


def pool_settings(rm: RewardModelConfig) -> PoolSettings:
    """What the block's pool sends with: timeout, retries, the bearer token, ``call_budget_s``."""
    return PoolSettings(
        timeout=rm.timeout,
        max_retries=rm.max_retries,
        total_timeout=rm.call_budget_s,
        max_in_flight=rm.max_in_flight,
        token=rm.token_value,
        health_route=rm.health_route,
    )


def endpoint_pool(rm: RewardModelConfig, urls: list[str]) -> RewardPool:
    """A new pool for a block (an ``EndpointPool``, or a ``RayHandlePool`` for ``ray://<app>``)."""
    return open_pool(urls, pool_settings(rm))


def check_reward_service(rm: RewardModelConfig, pool: RewardPool) -> Capabilities | None:
    """The start-up check: ``/capabilities`` once; a dead, refusing or foreign service raises
    ``ServiceUnavailableError`` unless ``require_service`` is false; the capabilities or None.
    """
    from evolve_envs.reward.clients.service_check import check_service

    return check_service(pool, require=rm.require_service, need_capabilities=rm.kind == "progress")


def start_embedded_service(rm: RewardModelConfig, envs: int = 1) -> EmbeddedService:
    """Start the local service ``endpoint: embedded`` asks for, admitting what ``envs`` envs can
    send at once (:func:`admission_for`); the caller stops it."""
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    svc = EmbeddedService(
        rm.embedded_backend,
        dict(rm.embedded_backend_kwargs),
        extra_args=["--max-concurrent-requests", str(admission_for(envs))],
    ).start()
    logger.info("started embedded reward service %s (%s)", svc.url, rm.embedded_backend)
    return svc


@contextlib.contextmanager
def shared_service(rm: RewardModelConfig, envs: int = 1) -> Iterator[str | None]:
    """One embedded service for a whole job of ``envs`` envs: yields its URL (``None`` when the
    block needs none)."""
    if not (rm.enable and rm.embedded):
        yield None
        return
    with start_embedded_service(rm, envs) as svc:
        yield svc.url


def _client(rm: RewardModelConfig, pool: RewardPool, max_workers: int) -> RewardClient:
    """The client of the block's ``kind`` on ``pool`` (which it leaves open)."""
    if isinstance(rm, ProgressModelConfig):
        from evolve_envs.reward.clients.progress_client import ProgressClient

        client = ProgressClient(
            pool,
            jpeg_quality=rm.jpeg_quality,
            fail_on_request_error=rm.fail_on_request_error,
            max_workers=max_workers,
        )
        if rm.average_cameras:  # one judgement per camera, averaged
            from evolve_envs.reward.clients.camera_average import CameraAverageClient

            return CameraAverageClient(client, len(rm.average_cameras), close_inner=True)
        return client
    if isinstance(rm, VideoScoreConfig):
        from evolve_envs.reward.clients.video_score_client import VideoScoreClient

        return VideoScoreClient(
            pool,
            nframes=rm.nframes,
            max_pixels=rm.max_pixels,
            video_fps=rm.video_fps,
            backend=rm.backend,
            backend_kwargs=rm.backend_kwargs or None,
            mode=rm.video_transport,
            shared_dir=rm.shared_dir,
            fail_on_request_error=rm.fail_on_request_error,
        )
    assert isinstance(rm, PickleScorerConfig)
    from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient

    return PickleScorerClient(
        pool,
        route=rm.pickle_route,
        jpeg_quality=rm.jpeg_quality,
        fail_on_request_error=rm.fail_on_request_error,
    )


class RewardModel:
    """An open reward model: ``config``, ``client``, ``capabilities``, ``service`` (the embedded one
    it started, else None) and ``pool``; :meth:`close` closes them in reverse order.
    """

    def __init__(
        self,
        config: RewardModelConfig,
        client: RewardClient,
        capabilities: Capabilities | None,
        service: EmbeddedService | None,
        pool: RewardPool,
        resources: contextlib.ExitStack,
    ) -> None:
        self.config = config
        self.client = client
        self.capabilities = capabilities
        self.service = service
        self.pool = pool
        self._resources = resources

    @property
    def settings(self) -> TrackerConfig:
        """The tracker settings of a ``kind: progress`` block."""
        if not isinstance(self.config, ProgressModelConfig):
            raise TypeError(f"a {self.config.kind!r} reward model has no progress settings")
        return self.config.tracker_config()

    def tracker(self, *, audit: TerminationAudit | None = None) -> ProgressTracker:
        """A new ``ProgressTracker`` on this client (share ``audit`` between a vector's)."""
        return ProgressTracker(
            self.client, self.settings, capabilities=self.capabilities, audit=audit
        )

    def close(self) -> None:
        """Close the client, then the pool this model opened, then stop its service."""
        self._resources.close()

    def __enter__(self) -> RewardModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RewardModel(kind={self.config.kind!r}, endpoints={list(self.pool.urls)!r})"


def open_reward_model(
    config: RewardModelConfig | Mapping[str, object] | str | os.PathLike[str],
    *,
    embedded_service: EmbeddedService | None = None,
    pool: RewardPool | None = None,
    max_workers: int = CLIENT_THREADS,
) -> RewardModel:
    """Open a reward model (the module docstring gives the steps); close it or use it in ``with``.

    ``config``: a validated block, a mapping of its keys or a YAML file. A given
    ``embedded_service`` / ``pool`` is used and left running / open (the pool's URLs replace the
    endpoints). Raises ``ConfigError`` (invalid or disabled block) and ``ServiceUnavailableError``.
    """
    rm = config if isinstance(config, RewardModelConfig) else _validated(config)
    if not rm.enable:
        raise ConfigError("reward_model.enable: is false; there is no reward model to open")
    with contextlib.ExitStack() as resources:
        service = None
        if pool is not None:
            urls = list(pool.urls)
        elif rm.embedded:
            if embedded_service is None:
                embedded_service = service = resources.enter_context(start_embedded_service(rm))
            urls = reward_endpoints(rm, embedded_service.url)
        else:
            urls = reward_endpoints(rm)
        if pool is None:
            pool = endpoint_pool(rm, urls)
            resources.callback(pool.close)
        client = _client(rm, pool, max_workers)
        resources.callback(client.close)
        capabilities = check_reward_service(rm, pool)
        return RewardModel(rm, client, capabilities, service, pool, resources.pop_all())


def _validated(source: Mapping[str, object] | str | os.PathLike[str]) -> RewardModelConfig:
    return load_config(reward_model_source(source)).reward_model
