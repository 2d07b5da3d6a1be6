"""``make_vec``: several copies of one stack sharing one reward service (and one validation).

>>> vec = make_vec("reach_place", num_envs=2, max_episode_steps=4)
>>> obs, info = vec.reset(seed=0)
>>> obs["image"].shape, vec.service.is_running()
((2, 64, 64, 3), True)
>>> vec.close()
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

import gymnasium as gym

from evolve_envs.stack.factory import make_env
from evolve_envs.stack.loading import load_config, reward_model_source
from evolve_envs.stack.reward_model import start_embedded_service

if TYPE_CHECKING:
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService
    from evolve_envs.stack.factory import StackSource

__all__ = ["make_vec", "make_vec_registered", "SharedServiceVectorEnv"]


class SharedServiceVectorEnv(gym.vector.VectorWrapper):
    """A vector env owning its sub-envs' shared reward service (``service``), stopped on close."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        resources: contextlib.ExitStack,
        service: EmbeddedService | None,
    ) -> None:
        super().__init__(env)
        self.service = service
        self._resources = resources

    # gymnasium's VectorWrapper does not forward these; the sub-envs answer them as usual
    def call(self, name: str, *args: object, **kwargs: object) -> tuple[object, ...]:
        """Call ``name`` on every sub-env (see :meth:`gymnasium.vector.VectorEnv.call`)."""
        return self.env.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[object, ...]:
        """Attribute ``name`` of every sub-env."""
        return self.env.get_attr(name)

    def set_attr(self, name: str, values: object) -> None:
        """Set attribute ``name`` on every sub-env."""
        self.env.set_attr(name, values)

    def close(self, **kwargs: object) -> None:
        try:
            super().close(**kwargs)
        finally:
            self._resources.close()


def make_vec(
    config: StackSource = None,
    num_envs: int = 1,
    *,
    vectorization_mode: Literal["sync", "async"] = "sync",
    vector_kwargs: Mapping[str, object] | None = None,
    reward_model: Mapping[str, object] | str | os.PathLike | None = None,
    env_factory: Callable[..., gym.Env] | None = None,
    **env_kwargs: object,
) -> SharedServiceVectorEnv:
    """``num_envs`` copies of the stack ``make_env(config, ...)`` builds, sharing one service.

    Arguments as for :func:`evolve_envs.make_env`, plus ``vectorization_mode`` (``"async"``: one
    process per sub-env; LIBERO wants ``vector_kwargs={"context": "spawn"}``) and ``vector_kwargs``
    for the vector env class. An invalid config raises before anything starts.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs: expected an int >= 1, got {num_envs!r}")
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(
            f"vectorization_mode: expected 'sync' or 'async', got {vectorization_mode!r}"
        )
    sources = list(config) if isinstance(config, list | tuple) else [config]
    rm_source = reward_model_source(reward_model) or {}
    overrides = {"env": dict(env_kwargs), **rm_source} if env_kwargs else dict(rm_source)
    cfg = load_config(*sources, overrides=overrides)  # validates before anything starts
    rm = cfg.reward_model
    with contextlib.ExitStack() as resources:
        service = None
        stack = cfg  # checked once: every sub-env builds this typed config as it is
        if rm.enable and rm.embedded:
            service = resources.enter_context(start_embedded_service(rm, num_envs))
            shared = rm.model_copy(update={"endpoint": service.url, "service_num": None})
            stack = cfg.model_copy(update={"reward_model": shared})
        thunk = functools.partial(make_env, stack, env_factory=env_factory)
        vector_cls = (
            gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
        )
        vec = vector_cls([thunk] * num_envs, **dict(vector_kwargs or {}))
        return SharedServiceVectorEnv(vec, resources.pop_all(), service)


def make_vec_registered(
    num_envs: int = 1,
    *,
    max_episode_steps: int | None = None,
    autoreset_mode: gym.vector.AutoresetMode | str | None = None,
    **kwargs: object,
) -> SharedServiceVectorEnv:
    """The vector entry point of every registered id (``gym.make_vec(id, num_envs=n)``).

    The id's default config unless ``config=`` is given; Gymnasium's ``max_episode_steps`` goes
    inside every sub-env, ``autoreset_mode`` to the vector env.
    """
    from evolve_envs.envs.registration import DEFAULT_CONFIGS, ENV_IDS

    suites = {suite: name for name, suite in ENV_IDS.items()}
    env_id = kwargs.get("id") or suites.get(kwargs.get("suite"))
    own_config = kwargs.get("config") is not None
    if not own_config and env_id in DEFAULT_CONFIGS:
        kwargs["config"] = DEFAULT_CONFIGS[str(env_id)]
    registered = gym.spec(str(env_id)).max_episode_steps if env_id else None
    spec_only = own_config and max_episode_steps == registered  # Gymnasium filled it in
    if max_episode_steps not in (None, -1) and not spec_only:  # -1: the config's limit
        kwargs["max_episode_steps"] = max_episode_steps
    if autoreset_mode is not None:
        vector_kwargs = dict(kwargs.get("vector_kwargs") or {})
        vector_kwargs["autoreset_mode"] = gym.vector.AutoresetMode(autoreset_mode)
        kwargs["vector_kwargs"] = vector_kwargs
    return make_vec(num_envs=num_envs, **kwargs)
