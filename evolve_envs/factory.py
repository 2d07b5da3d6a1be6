"""``make_env``: build the wrapper stack from a config.

The stack, innermost first::

    base env (LiberoEnv, or env_factory(...))
    -> time limit: TimeLimit(max_episode_steps) or ProgressiveHorizon (progressive_max_step)
    -> ProgressReward (kind: progress; the tracker keeps the frames it needs)
       or FrameCache -> EpisodeScoreReward (kind: video_score / pickle_scorer)
    -> HackingAlarm (reward_model.alarm.enable)

The time limit sits *inside* the reward wrappers so they see truncation and settle the episode.
With ``reward_model.enable: false`` the result is the base env plus its time limit.

``reward_model.endpoint: embedded`` starts a local reward service (``EmbeddedService`` with
``embedded_backend``, the mock backend by default) owned by the env: the reward wrapper stops it
in ``close()``. To share one service between several envs of a process, start it yourself and
pass it: ``make_env(..., embedded_service=svc)`` (then the envs use it and leave it running).
Each env opens its own endpoint pool and closes it in ``close()``; to share one between envs,
open it yourself and pass it the same way: ``make_env(..., endpoint_pool=pool)``.

Examples: ``make_env("libero_10", task_id=3)`` builds LIBERO-10 task 3 from the shipped YAML, and
``gym.make("evolve_envs/LIBERO-10-v0", ...)`` does the same through Gymnasium. The shipped
``reach_place`` config runs anywhere in seconds: the synthetic ReachPlace task, progress checks
every 2 steps against an embedded mock service that the env starts and stops::

    >>> env = make_env("reach_place", max_episode_steps=6)
    >>> env
    <ProgressReward<TimeLimit<ReachPlaceEnv instance>>>
    >>> obs, info = env.reset(seed=0)
    >>> info["task_description"]
    'pick up the red block and place it in the green zone'
    >>> [env.step(env.action_space.sample())[4]["progress_calls"] for _ in range(6)]
    [0, 1, 1, 2, 2, 3]
    >>> service = env.service            # owned by the reward wrapper
    >>> env.close(); service.is_running()
    False

Invalid keys are refused with their path (here on Gymnasium's CartPole, whose constructor has no
``colour``)::

    >>> from gymnasium.envs.classic_control import CartPoleEnv
    >>> env = make_env(env_factory=CartPoleEnv, max_episode_steps=5)  # reward model off
    >>> type(env).__name__, env.get_wrapper_attr("_max_episode_steps")
    ('TimeLimit', 5)
    >>> make_env(env_factory=CartPoleEnv, colour="red")
    Traceback (most recent call last):
    ...
    wrappers.settings.ConfigError: env.colour: unknown key for CartPoleEnv (accepted: ...)
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from evolve_envs.config import (
    ConfigError,
    PickleScorerConfig,
    ProgressModelConfig,
    RewardModelConfig,
    StackConfig,
    VideoScoreConfig,
    env_key_error,
    load_config,
    reward_model_source,
)
from wrappers.done_rules import TerminationAudit
from wrappers.episode_score import EpisodeScoreReward
from wrappers.frame_cache import FrameCache
from wrappers.hacking_alarm import HackingAlarm
from wrappers.progress_reward import ProgressReward
from wrappers.progress_tracker import ProgressTracker, episode_limit
from wrappers.progressive_horizon import ProgressiveHorizon

__all__ = [
    "make_env",
    "build_stack",
    "start_embedded_service",
    "ProgressModel",
    "open_progress_model",
    "endpoint_pool",
    "progress_client",
    "reward_endpoints",
    "check_reward_service",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- building


def _libero_factory() -> Callable[..., gym.Env]:
    from evolve_envs.libero import LiberoEnv

    return LiberoEnv


def _check_env_kwargs(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        name = getattr(factory, "__name__", "the env factory")
        raise ConfigError(
            f"env.{unknown[0]}: unknown key for {name} (accepted: "
            f"{', '.join(valid + ['max_episode_steps'])})"
        )


def _gym_id_factory(env_kwargs: dict[str, Any]) -> tuple[Callable[..., gym.Env] | None, int | None]:
    """``env.id``: build the base env from a registered Gymnasium id (its entry point, with the
    id's registered kwargs as defaults). LIBERO ids map to their suite. Pops ``id``."""
    env_id = env_kwargs.pop("id", None)
    if env_id is None:
        return None, None
    from evolve_envs.registration import ENV_IDS

    if env_id in ENV_IDS:
        env_kwargs.setdefault("suite", ENV_IDS[env_id])
        return None, None
    try:
        spec = gym.spec(str(env_id))
    except gym.error.Error as exc:
        raise ConfigError(f"env.id: {exc}") from exc
    entry = spec.entry_point
    creator = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
    for key, value in (spec.kwargs or {}).items():
        env_kwargs.setdefault(key, value)
    return creator, spec.max_episode_steps


def _default_max_steps(env_cfg: Mapping[str, Any], custom_factory: bool) -> int | None:
    if custom_factory:
        return None
    from evolve_envs.libero import default_max_episode_steps

    return default_max_episode_steps(env_cfg.get("suite", "libero_10"))


def reward_endpoints(rm: RewardModelConfig, url: str | None = None) -> list[str]:
    """The service URLs of a ``reward_model`` block (``url`` replaces an ``embedded`` one)."""
    from reward_clients.endpoint_pool import expand_endpoints

    if url is not None:
        return [url]
    from reward_clients.ray_handle_pool import is_ray_endpoint

    if is_ray_endpoint(rm.endpoint):  # a Ray Serve application, reached by DeploymentHandle
        return [rm.endpoint if isinstance(rm.endpoint, str) else rm.endpoint[0]]
    try:
        return expand_endpoints(rm.endpoint, None, rm.service_num)
    except ValueError as exc:
        raise ConfigError(f"reward_model.endpoint: {exc}") from None


def _check_camera(env: gym.Env, camera: str) -> None:
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and camera not in space.spaces:
        raise ConfigError(
            f"reward_model.camera: {camera!r} is not an observation key "
            f"(available: {', '.join(space.spaces)})"
        )


def endpoint_pool(rm: RewardModelConfig, urls: list[str]) -> Any:
    """A new :class:`~reward_clients.endpoint_pool.EndpointPool` for a ``reward_model`` block:
    per-attempt ``timeout``, ``max_retries``, the bearer ``token`` and ``call_budget_s`` (the
    most one call may take, retries and backoff included); or a
    :class:`~reward_clients.ray_handle_pool.RayHandlePool` for ``["ray://<app_name>"]``. The
    caller owns it: it closes it, or hands it to a client with ``close_pool=True``."""
    from reward_clients.endpoint_pool import EndpointPool
    from reward_clients.ray_handle_pool import RayHandlePool, is_ray_endpoint

    if is_ray_endpoint(urls):
        return RayHandlePool(urls[0], timeout=rm.timeout, max_retries=rm.max_retries)

    return EndpointPool(
        urls,
        timeout=rm.timeout,
        max_retries=rm.max_retries,
        token=rm.token_value,
        total_timeout=rm.call_budget_s,
        health_route=rm.health_route,
    )


def check_reward_service(rm: RewardModelConfig, pool: Any) -> Any:
    """The start-up failure policy of every stack (Gymnasium and RLinf): ask ``/capabilities``
    once; a dead, refusing (401/403) or foreign service raises
    :class:`~reward_clients.service_check.ServiceUnavailableError` naming the endpoint and the
    cause, unless ``reward_model.require_service`` is false (then a warning, and ``None``).

    Returns the service's capabilities, or ``None`` when they could not be read.
    """
    from reward_clients.service_check import check_service

    return check_service(pool, require=rm.require_service, need_capabilities=rm.kind == "progress")


def progress_client(
    rm: RewardModelConfig, urls: list[str], *, max_workers: int = 8, pool: Any = None
) -> Any:
    """The :class:`~reward_clients.progress_client.ProgressClient` a ``reward_model`` block asks
    for, on ``pool`` (shared: left open) or on a new pool (:func:`endpoint_pool`) that the
    client owns and closes."""
    from reward_clients.progress_client import ProgressClient

    owned = pool is None
    pool = endpoint_pool(rm, urls) if owned else pool
    try:
        return ProgressClient(
            pool,
            jpeg_quality=rm.jpeg_quality,
            fail_on_request_error=rm.fail_on_request_error,
            max_workers=max_workers,
            close_pool=owned,
        )
    except BaseException:
        if owned:
            pool.close()
        raise


class ProgressModel:
    """What a ``kind: progress`` block opens, for every progress stack (``make_env``'s
    :class:`~wrappers.progress_reward.ProgressReward` and the RLinf integration's trackers):
    the client, the service's capabilities (asked once under :func:`check_reward_service`'s
    start-up policy), the tracker settings and the embedded service started for it, if any.
    :meth:`close` closes what it opened. Built by :func:`open_progress_model`.
    """

    def __init__(
        self, config: ProgressModelConfig, client: Any, capabilities: Any, service: Any
    ) -> None:
        self.config = config
        self.client = client
        self.capabilities = capabilities
        self.settings = config.tracker_settings()
        self.service = service

    def tracker(self, *, audit: TerminationAudit | None = None) -> ProgressTracker:
        """A new :class:`~wrappers.progress_tracker.ProgressTracker` on this client (the
        settings are checked against the capabilities when they could be read); ``audit``
        counts its episodes (share one between the trackers of a vectorised env)."""
        return ProgressTracker(
            self.client, self.settings, capabilities=self.capabilities, audit=audit
        )

    def close(self) -> None:
        """Close the client, then stop the embedded service this model started."""
        try:
            self.client.close()
        finally:
            if self.service is not None:
                self.service.stop()
                self.service = None


def _close_partial(client: Any, owned: Any) -> None:
    """Undo a stack built halfway: close the client (if made), then stop the service it
    started (if any)."""
    try:
        if client is not None:
            client.close()
    finally:
        if owned is not None:
            owned.stop()


def _service_urls(
    rm: RewardModelConfig, embedded_service: Any, pool: Any = None
) -> tuple[list[str], Any]:
    """The block's service URLs and the embedded service started for them (``None`` when the
    endpoint is not ``embedded``, ``embedded_service`` serves it, or a shared ``pool`` is given:
    then its URLs are used)."""
    if pool is not None:
        return list(pool.urls), None
    if not rm.embedded:
        return reward_endpoints(rm), None
    owned = None
    if embedded_service is None:
        owned = embedded_service = start_embedded_service(rm)
    return reward_endpoints(rm, embedded_service.url), owned


def open_progress_model(
    rm: ProgressModelConfig,
    *,
    embedded_service: Any = None,
    pool: Any = None,
    max_workers: int = 8,
) -> ProgressModel:
    """Open a ``kind: progress`` block's reward model: start the embedded service it asks for
    (unless ``embedded_service`` or a shared endpoint ``pool`` is given), build the client (on
    ``pool``, left open, or on a pool of its own), apply the start-up failure policy
    (:func:`check_reward_service`). On any failure what was opened is closed again."""
    urls, owned = _service_urls(rm, embedded_service, pool)
    client = None
    try:
        client = progress_client(rm, urls, max_workers=max_workers, pool=pool)
        capabilities = check_reward_service(rm, client.pool)
        return ProgressModel(rm, client, capabilities, owned)
    except BaseException:
        _close_partial(client, owned)
        raise


def _progress_wrapper(
    env: gym.Env, rm: ProgressModelConfig, embedded_service: Any, pool: Any
) -> gym.Env:
    model = open_progress_model(rm, embedded_service=embedded_service, pool=pool)
    try:
        wrapper = ProgressReward(
            env,
            model.client,
            model.settings,
            camera=rm.camera,
            capabilities=model.capabilities if model.capabilities is not None else False,
            close_client=True,
            service=model.service,
            reward_weight=rm.reward_weight,
            env_reward_weight=rm.env_reward_weight,
        )
        wrapper.tracker.time_limit = functools.partial(episode_limit, env)  # last_check
        return wrapper
    except BaseException:
        model.close()
        raise


def _episode_score_client(
    rm: VideoScoreConfig | PickleScorerConfig, urls: list[str], pool: Any
) -> Any:
    """The block's video score or pickle scorer client, on ``pool`` (shared: left open) or on a
    new pool the client owns and closes."""
    owned = pool is None
    pool = endpoint_pool(rm, urls) if owned else pool
    try:
        if isinstance(rm, VideoScoreConfig):
            from reward_clients.video_score_client import VideoScoreClient

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
                close_pool=owned,
            )
        from reward_clients.pickle_scorer_client import PickleScorerClient

        return PickleScorerClient(
            pool,
            route=rm.pickle_route,
            jpeg_quality=rm.jpeg_quality,
            fail_on_request_error=rm.fail_on_request_error,
            close_pool=owned,
        )
    except BaseException:
        if owned:
            pool.close()
        raise


def _episode_score_wrapper(
    env: gym.Env, rm: VideoScoreConfig | PickleScorerConfig, embedded_service: Any, pool: Any
) -> gym.Env:
    urls, owned = _service_urls(rm, embedded_service, pool)
    client = None
    try:
        client = _episode_score_client(rm, urls, pool)
        check_reward_service(rm, client.pool)
        env = FrameCache(
            env,
            rm.camera,
            encoding=rm.cache_encoding,
            jpeg_quality=rm.jpeg_quality,
            max_frames=rm.cache_max_frames,
        )
        return EpisodeScoreReward(
            env,
            client,
            binary_reward=rm.binary_reward,
            success_threshold=rm.success_threshold,
            reward_coef=rm.reward_coef,
            use_rel_reward=rm.use_rel_reward,
            ignore_terminations=rm.ignore_terminations,
            last_frames=rm.last_frames,
            close_client=True,
            service=owned,
            reward_weight=rm.reward_weight,
            env_reward_weight=rm.env_reward_weight,
        )
    except BaseException:
        _close_partial(client, owned)
        raise


def describe_reward_model(rm: RewardModelConfig) -> str | None:
    """A short description of the reward model a stack uses (stored with recorded episodes)."""
    if not rm.enable:
        return None
    if rm.embedded:
        kwargs = ",".join(f"{k}={v}" for k, v in sorted(rm.embedded_backend_kwargs.items()))
        return f"{rm.kind}: embedded {rm.embedded_backend}({kwargs})"
    endpoint = rm.endpoint if isinstance(rm.endpoint, str) else ",".join(rm.endpoint)
    return f"{rm.kind}: {endpoint}"


def build_stack(
    cfg: StackConfig,
    env_factory: Callable[..., gym.Env] | None = None,
    *,
    embedded_service: Any = None,
    endpoint_pool: Any = None,
) -> gym.Env:
    """Build the wrapper stack for a validated :class:`~evolve_envs.config.StackConfig`.

    ``embedded_service`` (a started :class:`~reward_service.embedded.EmbeddedService`) serves
    ``endpoint: embedded`` and is left running; without it the stack starts its own, owned and
    stopped by the reward wrapper's ``close()``. ``endpoint_pool`` (an open
    :class:`~reward_clients.endpoint_pool.EndpointPool`) carries the reward requests instead of
    ``reward_model.endpoint`` and is left open; without it the stack opens a pool of its own,
    closed with the reward wrapper's client.
    """
    if cfg.record is not None:  # outermost, so it sees the reward wrappers' info
        from wrappers.record_episodes import RecordEpisodes

        env = build_stack(
            cfg.model_copy(update={"record": None}),
            env_factory,
            embedded_service=embedded_service,
            endpoint_pool=endpoint_pool,
        )
        rm = cfg.reward_model
        try:
            return RecordEpisodes(
                env, cfg.record.dir, camera=cfg.record.camera or rm.camera,
                jpeg_quality=cfg.record.jpeg_quality,
                reward_model=cfg.record.reward_model or describe_reward_model(rm),
                # the threshold the run used: calibrate's default for this recording
                meta={"done_threshold": rm.done_threshold} if rm.enable else None,
            )  # fmt: skip
        except BaseException:
            env.close()
            raise
    rm = cfg.reward_model
    env_kwargs = dict(cfg.env)
    max_steps = env_kwargs.pop("max_episode_steps", None)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 1):  # fmt: skip
        raise ConfigError(f"env.max_episode_steps: expected an int >= 1, got {max_steps!r}")
    id_factory, id_max_steps = _gym_id_factory(env_kwargs)
    if env_factory is None:
        env_factory = id_factory
        max_steps = max_steps if max_steps is not None else id_max_steps
    factory = env_factory if env_factory is not None else _libero_factory()
    _check_env_kwargs(factory, env_kwargs)
    try:  # the base env's rejection of a key names it as env.<key>
        if max_steps is None:
            max_steps = _default_max_steps(env_kwargs, env_factory is not None)
        env = factory(**env_kwargs)
    except ValueError as exc:
        raise env_key_error(exc, env_kwargs) from exc
    try:
        if rm.progressive_max_step:
            sched = rm.progressive_schedule
            stages = [stage.resolve(max_steps) for stage in sched.stages]
            env = ProgressiveHorizon(env, stages, by=sched.by, window=sched.window)
        elif max_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=max_steps)
        if not rm.enable:
            return env

        _check_camera(env, rm.camera)
        if isinstance(rm, ProgressModelConfig):
            env = _progress_wrapper(env, rm, embedded_service, endpoint_pool)
        else:
            assert isinstance(rm, VideoScoreConfig | PickleScorerConfig)
            env = _episode_score_wrapper(env, rm, embedded_service, endpoint_pool)
        if rm.alarm.enable:
            env = HackingAlarm(env, rm.alarm.detector_settings())
        return env
    except BaseException:
        env.close()
        raise


def start_embedded_service(rm: RewardModelConfig) -> Any:
    """Start the local reward service ``endpoint: embedded`` asks for (``embedded_backend``
    with ``embedded_backend_kwargs``); the caller owns it and stops it."""
    from reward_service.embedded import EmbeddedService

    svc = EmbeddedService(rm.embedded_backend, dict(rm.embedded_backend_kwargs)).start()
    logger.info("started embedded reward service %s (%s)", svc.url, rm.embedded_backend)
    return svc


def make_env(
    config: Any = None,
    *,
    reward_model: Mapping[str, Any] | str | os.PathLike | None = None,
    env_factory: Callable[..., gym.Env] | None = None,
    embedded_service: Any = None,
    endpoint_pool: Any = None,
    **env_kwargs: Any,
) -> gym.Env:
    """Build a (wrapped) env from a config.

    Args:
        config: a YAML path, a mapping / OmegaConf ``DictConfig`` with ``env:`` and
            ``reward_model:`` blocks, a list of them (layered left to right, e.g. a suite YAML
            then a preset), or ``None`` (defaults: LIBERO-10 task 0, reward model off).
        reward_model: ``reward_model`` keys (mapping) or a YAML file (with a ``reward_model:``
            block, or holding the block itself) overriding the config and environment variables.
        env_factory: builds the base env from the ``env`` block (default
            :class:`evolve_envs.libero.LiberoEnv`); without it ``max_episode_steps`` defaults to
            the suite's.
        embedded_service: a started :class:`~reward_service.embedded.EmbeddedService` to use
            for ``endpoint: embedded`` (shared, left running); by default the env starts its
            own and stops it in ``close()``.
        endpoint_pool: an open :class:`~reward_clients.endpoint_pool.EndpointPool` to send the
            reward requests through (shared by several envs: one connection pool, one view of
            endpoint health; left open, and its endpoints replace ``reward_model.endpoint``); by
            default the env opens its own pool and closes it in ``close()``.
        **env_kwargs: ``env`` keys overriding the config (``suite``, ``task_id``,
            ``max_episode_steps``, ``image_size``, ...).

    Raises:
        evolve_envs.config.ConfigError: invalid config (the message names the key).

    ``make_env(["libero_10", "fast_dev"], task_id=2)`` layers a preset over a suite config;
    ``gym.make("evolve_envs/LIBERO-Goal-v0", config="libero_goal")`` goes through Gymnasium.
    The module docstring has a runnable example.
    """
    sources = list(config) if isinstance(config, list | tuple) else [config]
    overrides: dict[str, Any] = {}
    if env_kwargs:
        overrides["env"] = dict(env_kwargs)
    rm_source = reward_model_source(reward_model)
    if rm_source is not None:
        overrides.update(rm_source)
    cfg = load_config(*sources, overrides=overrides)
    return build_stack(
        cfg, env_factory, embedded_service=embedded_service, endpoint_pool=endpoint_pool
    )
