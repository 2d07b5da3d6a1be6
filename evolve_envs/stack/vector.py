"""``make_vec``: several copies of one stack, sharing one reward service.

``make_env`` called once per sub-env would start one embedded service per sub-env for
``endpoint: embedded``. :func:`make_vec` starts **one** service for all of them (the sub-envs get
its URL), builds a :class:`gymnasium.vector.SyncVectorEnv` or
:class:`gymnasium.vector.AsyncVectorEnv` of ``make_env`` calls, and stops the service when the
vector env closes. Every id this package registers builds through it (its ``vector_entry_point``
is :func:`make_vec_registered`), so ``gym.make_vec(id, num_envs=n)`` (with the default
vectorization mode) shares one service too;
``gym.make_vec(..., vectorization_mode="sync" | "async")`` bypasses it and builds each sub-env
through ``gym.make``, one service each.

Example (ReachPlace, two sub-envs, one embedded mock service)::

    >>> vec = make_vec("reach_place", num_envs=2, max_episode_steps=4)
    >>> obs, info = vec.reset(seed=0)
    >>> obs["image"].shape, vec.service.is_running()
    ((2, 64, 64, 3), True)
    >>> service = vec.service
    >>> vec.close(); service.is_running()
    False
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym

from evolve_envs.stack.factory import make_env
from evolve_envs.stack.loading import load_config, reward_model_source
from evolve_envs.stack.reward_model import start_embedded_service

if TYPE_CHECKING:
    from evolve_envs.reward.service.embedded import EmbeddedService
    from evolve_envs.stack.factory import StackSource

__all__ = ["make_vec", "make_vec_registered", "SharedServiceVectorEnv"]


class SharedServiceVectorEnv(gym.vector.VectorWrapper):
    """A vector env that owns the reward service its sub-envs share: :meth:`close` closes the
    sub-envs, then stops the service. Built by :func:`make_vec` (the module docstring has a
    runnable example).

    Attributes:
        service: the embedded service the sub-envs send to, or ``None``.
    """

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
    """Build ``num_envs`` copies of the stack ``make_env(config, ...)`` builds, sharing one
    embedded reward service (when the config asks for one).

    Args:
        config, reward_model, env_factory, **env_kwargs: as for :func:`evolve_envs.make_env`.
        num_envs: number of sub-envs (>= 1).
        vectorization_mode: ``"sync"`` (one process) or ``"async"`` (one process per sub-env;
            pass ``vector_kwargs={"context": "spawn"}`` for LIBERO, see docs/getting-started.md,
            "Environments").
        vector_kwargs: keyword arguments of the vector env class.

    Raises:
        evolve_envs.ConfigError: an invalid config (checked before anything starts).
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
            service = resources.enter_context(start_embedded_service(rm))
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
    **kwargs: Any,
) -> SharedServiceVectorEnv:
    """The vector entry point of every registered id (``gym.make_vec(id, num_envs=n)``):
    :func:`make_vec` with the id's default config when no ``config=`` is given, and the limit
    Gymnasium passes (``max_episode_steps=``, the spec's unless the call names one) inside
    every sub-env. A config of the caller's keeps its own limit when Gymnasium passes only the
    spec's. ``autoreset_mode`` goes to the vector env (Gymnasium lets a vector entry point take
    no ``vector_kwargs``): ``gym.make_vec(id, num_envs=n, autoreset_mode="SameStep")``.

    >>> vec = gym.make_vec("evolve_envs/ReachPlace-v0", num_envs=2)
    >>> vec.get_attr("_max_episode_steps"), vec.service.is_running()
    ((50, 50), True)
    >>> vec.close()
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
