"""``make_env``: build the wrapper stack from a config (docs/ARCHITECTURE.md has its layers).

Innermost first: the base env, its time limit (``TimeLimit`` or ``ProgressiveHorizon``), the
reward wrapper of the block's ``kind``, then the success bonus and the hacking alarm.
``endpoint: embedded`` starts a reward service the env owns; pass ``embedded_service=`` or
``endpoint_pool=`` to share one between envs (left running / open). The shipped ``reach_place``
config runs anywhere in seconds::

    >>> env = make_env("reach_place", max_episode_steps=6)
    >>> env
    <ProgressReward<TimeLimit<ReachPlaceEnv<evolve_envs/ReachPlace-v0>>>>
    >>> _ = env.reset(seed=0)
    >>> [env.step(env.action_space.sample())[4]["progress_calls"] for _ in range(6)]
    [0, 1, 1, 2, 2, 3]
    >>> env.close()
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from evolve_envs.progress.check_schedule import episode_limit
from evolve_envs.progress.config_error import ConfigError
from evolve_envs.stack.config import (
    PickleScorerConfig,
    ProgressModelConfig,
    RewardModelConfig,
    StackConfig,
    VideoScoreConfig,
)
from evolve_envs.stack.loading import env_key_error, load_config, reward_model_source
from evolve_envs.stack.reward_model import open_reward_model
from evolve_envs.wrappers.episode_score import EpisodeScoreReward
from evolve_envs.wrappers.frame_cache import FrameCache
from evolve_envs.wrappers.progress_reward import ProgressReward
from evolve_envs.wrappers.progressive_horizon import ProgressiveHorizon

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from evolve_envs.reward.clients.pool_settings import RewardPool
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    #: One layer of :func:`make_env`'s ``config``: a YAML path, a mapping, an OmegaConf node.
    StackLayer = str | os.PathLike[str] | Mapping[str, object] | DictConfig
    #: What :func:`make_env` takes as ``config``.
    StackSource = StackConfig | StackLayer | list[StackLayer] | tuple[StackLayer, ...] | None

__all__ = ["make_env", "build_stack", "describe_reward_model"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- building


def _libero_factory() -> Callable[..., gym.Env]:
    from evolve_envs.envs.libero import LiberoEnv

    return LiberoEnv


def _check_env_kwargs(factory: Callable[..., gym.Env], kwargs: Mapping[str, object]) -> None:
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


def _gym_id_factory(
    env_kwargs: dict[str, object],
) -> tuple[Callable[..., gym.Env] | None, int | None]:
    """``env.id`` (popped): the base env's factory and registered limit (every path comes here).

    LIBERO ids set ``suite``; other registered ids (``module:Name-v0`` too) build through their
    entry point with the id's kwargs as defaults.
    """
    env_id = env_kwargs.pop("id", None)
    if env_id is None:
        return None, None
    from evolve_envs.envs.registration import ENV_IDS, SYNTHETIC_IDS

    env_id = str(env_id)
    if env_id in ENV_IDS:
        env_kwargs.setdefault("suite", ENV_IDS[env_id])
        return None, None
    if env_id in SYNTHETIC_IDS:  # the registered limit, as gym.make reads it
        creator = gym.envs.registration.load_env_creator(SYNTHETIC_IDS[env_id])
        return creator, gym.spec(env_id).max_episode_steps
    module, _, name = env_id.rpartition(":")
    try:
        if module:  # ``module:Name-v0`` registers its ids on import, as gym.make does
            importlib.import_module(module)
        spec = gym.spec(name)
    except (gym.error.Error, ImportError) as exc:
        raise ConfigError(f"env.id: {exc}") from exc
    entry = spec.entry_point
    creator = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
    for key, value in (spec.kwargs or {}).items():
        env_kwargs.setdefault(key, value)
    return creator, spec.max_episode_steps


def _default_max_steps(env_cfg: Mapping[str, object], custom_factory: bool) -> int | None:
    if custom_factory:
        return None
    from evolve_envs.envs.libero_tasks import default_max_episode_steps

    return default_max_episode_steps(env_cfg.get("suite", "libero_10"))


def _check_camera(env: gym.Env, camera: str) -> None:
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and camera not in space.spaces:
        raise ConfigError(
            f"reward_model.camera: {camera!r} is not an observation key "
            f"(available: {', '.join(space.spaces)})"
        )


def _reward_wrapper(
    env: gym.Env,
    rm: RewardModelConfig,
    embedded_service: EmbeddedService | None,
    pool: RewardPool | None,
) -> gym.Env:
    """The reward wrapper of the block's kind around ``env``, owning the model it opens; its
    reward step pays the success bonus and feeds the alarm the block asks for."""
    step_kwargs: dict[str, object] = {
        "reward_weight": rm.reward_weight,
        "env_reward_weight": rm.env_reward_weight,
        "success_bonus": rm.success_bonus,
        "success_bonus_threshold": rm.success_bonus_threshold,
        "alarm": rm.alarm.detector_settings() if rm.alarm.enable else None,
    }
    with contextlib.ExitStack() as undo:  # on failure: close the model (not ``env``)
        model = undo.enter_context(
            open_reward_model(rm, embedded_service=embedded_service, pool=pool)
        )
        wrapper: gym.Env
        if isinstance(rm, ProgressModelConfig):
            # several cameras: the model's client averages one judgement per camera
            camera = tuple(rm.average_cameras) if rm.average_cameras else rm.camera
            wrapper = ProgressReward(env, model, camera=camera, **step_kwargs)
            wrapper.tracker.time_limit = functools.partial(episode_limit, env)  # last_check
        else:
            assert isinstance(rm, VideoScoreConfig | PickleScorerConfig)
            cache = FrameCache(
                env,
                rm.camera,
                encoding=rm.cache_encoding,
                jpeg_quality=rm.jpeg_quality,
                max_frames=rm.cache_max_frames,
            )
            wrapper = EpisodeScoreReward(
                cache,
                model,
                binary_reward=rm.binary_reward,
                success_threshold=rm.success_threshold,
                reward_coef=rm.reward_coef,
                use_rel_reward=rm.use_rel_reward,
                ignore_terminations=rm.ignore_terminations,
                last_frames=rm.last_frames,
                **step_kwargs,
            )
        undo.pop_all()  # the wrapper owns the model now
        return wrapper


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
    embedded_service: EmbeddedService | None = None,
    endpoint_pool: RewardPool | None = None,
) -> gym.Env:
    """Build the wrapper stack for a validated :class:`~evolve_envs.stack.config.StackConfig`.

    A given ``embedded_service`` / ``endpoint_pool`` is used and left running / open; without them
    the reward wrapper owns and closes its own.
    """
    rm = cfg.reward_model
    if cfg.record is not None and rm.enable and getattr(rm, "calls", None) == "deferred":
        raise ConfigError(
            "record: a recording takes each step's reward as the step returns it; with "
            "reward_model.calls: deferred the model's part comes later, with the settled episode "
            "(record with calls: sync or async)"
        )
    if cfg.record is not None:  # outermost, so it sees the reward wrappers' info
        from evolve_envs.wrappers.record_episodes import RecordEpisodes

        env = build_stack(
            cfg.model_copy(update={"record": None}),
            env_factory,
            embedded_service=embedded_service,
            endpoint_pool=endpoint_pool,
        )
        rm = cfg.reward_model
        with contextlib.ExitStack() as undo:
            undo.callback(env.close)
            recorded = RecordEpisodes(
                env,
                cfg.record.dir,
                camera=cfg.record.camera or rm.camera,
                cameras=cfg.record.cameras,
                jpeg_quality=cfg.record.jpeg_quality,
                reward_model=cfg.record.reward_model or describe_reward_model(rm),
                # the threshold the run used: calibrate's default for this recording
                meta={"done_threshold": rm.done_threshold} if rm.enable else None,
            )
            undo.pop_all()
            return recorded
    rm = cfg.reward_model
    env_kwargs = dict(cfg.env)
    max_steps = env_kwargs.pop("max_episode_steps", None)
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
    ):
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
    with contextlib.ExitStack() as undo:  # a failure closes the env built so far
        undo.callback(env.close)
        if rm.progressive_max_step:
            sched = rm.progressive_schedule
            stages = [stage.resolve(max_steps) for stage in sched.stages]
            env = ProgressiveHorizon(env, stages, by=sched.by, window=sched.window)
        elif max_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=max_steps)
        if rm.enable:
            for camera in [rm.camera, *getattr(rm, "average_cameras", [])]:
                _check_camera(env, camera)
            env = _reward_wrapper(env, rm, embedded_service, endpoint_pool)
        undo.pop_all()
        return env


def make_env(
    config: StackSource = None,
    *,
    reward_model: Mapping[str, object] | str | os.PathLike[str] | None = None,
    env_factory: Callable[..., gym.Env] | None = None,
    embedded_service: EmbeddedService | None = None,
    endpoint_pool: RewardPool | None = None,
    **env_kwargs: object,
) -> gym.Env:
    """Build a (wrapped) env from a config; a bad key raises :class:`~evolve_envs.ConfigError`.

    ``config``: a YAML path or shipped name, a mapping / OmegaConf node with ``env:`` and
    ``reward_model:`` blocks, a list of them (layered left to right), ``None`` (LIBERO-10 task 0,
    reward model off), or a :class:`~evolve_envs.stack.config.StackConfig` built as it is (nothing
    read from the environment or validated again). ``reward_model`` (keys or a YAML file) and
    ``env_kwargs`` override it; ``env_factory`` builds the base env (default ``LiberoEnv``). A given
    ``embedded_service`` / ``endpoint_pool`` is shared and left running / open.
    """
    if isinstance(config, StackConfig) and reward_model is None and not env_kwargs:
        cfg = config  # checked where it was loaded: built as it is
    else:
        sources = list(config) if isinstance(config, list | tuple) else [config]
        overrides: dict[str, object] = {}
        if env_kwargs:
            overrides["env"] = dict(env_kwargs)
        rm_source = reward_model_source(reward_model)
        if rm_source is not None:
            overrides.update(rm_source)
        cfg = load_config(*sources, overrides=overrides)
    env = build_stack(
        cfg, env_factory, embedded_service=embedded_service, endpoint_pool=endpoint_pool
    )
    if env.unwrapped.spec is None:  # gym.make sets its own; a direct call gets one here
        env.unwrapped.spec = _stack_spec(cfg, env_factory)
    return env


def _stack_spec(cfg: StackConfig, env_factory: Callable[..., gym.Env] | None) -> EnvSpec:
    """The ``EnvSpec`` of a directly built stack: ``make_env(**spec.kwargs)`` builds it again."""
    from evolve_envs.envs.registration import ENV_IDS

    env_id = cfg.env.get("id")
    if env_id is None and env_factory is None:
        suites = {suite: name for name, suite in ENV_IDS.items()}
        env_id = suites.get(cfg.env.get("suite", "libero_10"))
    if env_id is None:
        env_id = f"evolve_envs/{getattr(env_factory, '__name__', 'Env')}"
    return EnvSpec(
        id=str(env_id).rpartition(":")[2],
        entry_point="evolve_envs.stack.factory:make_env",
        kwargs={"config": cfg.handoff()},  # re-made from its spec, it reaches the same service
        max_episode_steps=None,  # the limit sits inside the stack, see the module docstring
    )


def make_registered(**kwargs: object) -> gym.Env:
    """The entry point of every registered id: :func:`make_env` with the id's default config.

    The stack's limit is the config's ``env.max_episode_steps``, else the id's registered one, which
    Gymnasium also applies outside (:mod:`evolve_envs.envs.registration`).

    >>> import evolve_envs  # noqa: F401
    >>> env = gym.make("evolve_envs/ReachPlace-v0")  # the embedded mock model, 50 steps
    >>> env.get_wrapper_attr("reward_model").service.is_running()
    True
    >>> env.close()
    """
    from evolve_envs.envs.registration import DEFAULT_CONFIGS

    env_id = kwargs.get("id")
    if kwargs.get("config") is None and env_id in DEFAULT_CONFIGS:
        kwargs["config"] = DEFAULT_CONFIGS[str(env_id)]
    return make_env(**kwargs)
