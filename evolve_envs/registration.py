"""Gymnasium registration of the LIBERO suites.

Importing :mod:`evolve_envs` registers one id per suite. ``gym.make`` keyword arguments go to
:func:`evolve_envs.factory.make_env` (LiberoEnv options, ``reward_model=...``, ``config=...``)::

    import gymnasium as gym
    import evolve_envs  # noqa: F401  (registers the ids)

    env = gym.make("evolve_envs/LIBERO-10-v0", task_id=3, reward_model={"enable": False})

The time limit (the suite's max steps, or ``env.max_episode_steps``) is applied *inside* the
wrapper stack so the reward wrappers see the truncation and settle the episode. Set it through
the config -- ``gym.make(id, config={"env": {"max_episode_steps": 300}})`` or
``make_env(..., max_episode_steps=300)`` -- or with Gymnasium's own keyword,
``gym.make(id, max_episode_steps=300)``: Gymnasium consumes that keyword and puts a ``TimeLimit``
*outside* the stack, where the reward wrappers would never see its truncation, so the ids
*replace* it (:func:`replace_outer_time_limit`, a wrapper entry of every id's spec): the outer
``TimeLimit`` is removed and the stack is rebuilt with that limit inside (the stack built first
is closed; with the limit it already had, nothing is rebuilt). ``max_episode_steps=-1`` keeps
the config's limit, as in Gymnasium.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

ENV_IDS: dict[str, str] = {
    "evolve_envs/LIBERO-10-v0": "libero_10",
    "evolve_envs/LIBERO-Spatial-v0": "libero_spatial",
    "evolve_envs/LIBERO-Object-v0": "libero_object",
    "evolve_envs/LIBERO-Goal-v0": "libero_goal",
    "evolve_envs/LIBERO-90-v0": "libero_90",
}


#: Synthetic tasks: id -> the base env class. ``gym.make`` builds them through ``make_env``
#: like the LIBERO ids, so they take the same ``reward_model=`` and ``config=`` keywords.
SYNTHETIC_IDS: dict[str, str] = {"evolve_envs/ReachPlace-v0": "evolve_envs.synthetic:ReachPlaceEnv"}


class RegisteredStack(gym.Wrapper):
    """The stack ``gym.make`` builds for one of our ids (the outermost layer of what the entry
    point returns; it changes nothing). Its ``spec`` is the id's spec without the stack's own
    wrappers: the entry point builds them, so ``gym.make(env.spec)`` must not add them again, and
    Gymnasium then applies the id's wrapper entries (:func:`replace_outer_time_limit`) on top."""

    @property
    def spec(self) -> Any:
        return self.env.unwrapped.spec


def make_registered(**kwargs: Any) -> gym.Env:
    """The entry point of every id: :func:`evolve_envs.factory.make_env` in a
    :class:`RegisteredStack`."""
    from evolve_envs.factory import make_env

    return RegisteredStack(make_env(**kwargs))


def _inner_limit(stack: gym.Env) -> int | None:
    """The limit of a plain ``TimeLimit`` inside ``stack`` (None: none, or a progressive one)."""
    env = stack
    while isinstance(env, gym.Wrapper):
        if type(env) is gym.wrappers.TimeLimit:
            return int(env._max_episode_steps)
        env = env.env
    return None


def replace_outer_time_limit(env: gym.Env) -> gym.Env:
    """Wrapper entry of every id's spec: replace the ``TimeLimit`` that
    ``gym.make(id, max_episode_steps=N)`` puts outside the stack by the limit ``N`` inside it
    (see the module docstring); anything else is returned as it is.

    >>> import evolve_envs  # noqa: F401
    >>> env = gym.make("evolve_envs/ReachPlace-v0", max_episode_steps=7,
    ...                reward_model={"enable": False})
    >>> limits, layer = [], env
    >>> while isinstance(layer, gym.Wrapper):
    ...     if isinstance(layer, gym.wrappers.TimeLimit):
    ...         limits.append(layer._max_episode_steps)
    ...     layer = layer.env
    >>> limits, env.spec.kwargs["max_episode_steps"]
    ([7], 7)
    >>> env.close()
    """
    above: list[gym.Wrapper] = []  # the layers gym.make put above the stack, outermost first
    layer = env
    while not isinstance(layer, RegisteredStack):
        if not isinstance(layer, gym.Wrapper):
            return env  # not one of our stacks
        above.append(layer)
        layer = layer.env
    stack = layer
    outer = [w for w in above if type(w) is gym.wrappers.TimeLimit]
    if not outer:
        return env
    limit = int(outer[0]._max_episode_steps)
    if _inner_limit(stack) != limit:
        spec = stack.unwrapped.spec
        kwargs = {**(spec.kwargs if spec is not None else {}), "max_episode_steps": limit}
        stack.close()
        stack = make_registered(**kwargs)
        if spec is not None:
            stack.unwrapped.spec = dataclasses.replace(spec, kwargs=kwargs)
        above[-1].env = stack
    for i, wrapper in enumerate(above):  # drop the outer limit
        if wrapper is outer[0]:
            if i == 0:
                return wrapper.env
            above[i - 1].env = wrapper.env
    return env


#: Wrapper entries of every id's spec, applied by ``gym.make`` after its own wrappers.
ID_WRAPPERS = (
    WrapperSpec(
        name="ReplaceOuterTimeLimit",
        entry_point="evolve_envs.registration:replace_outer_time_limit",
        kwargs={},
    ),
)


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS` and :data:`SYNTHETIC_IDS` (idempotent).

    Each id's entry point is :func:`make_registered` (:func:`evolve_envs.factory.make_env`): a
    LIBERO id passes its suite, a synthetic id passes itself as ``env.id``, which ``make_env``
    resolves to the base env class. The vector entry point is :func:`evolve_envs.vector.make_vec`
    (one embedded service shared by all sub-envs). ``gym.make(id, max_episode_steps=N)`` sets
    the limit inside the stack (:func:`replace_outer_time_limit`).
    """
    for env_id in SYNTHETIC_IDS:
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="evolve_envs.registration:make_registered",
                vector_entry_point="evolve_envs.vector:make_vec",
                kwargs={"id": env_id},
                max_episode_steps=None,
                additional_wrappers=ID_WRAPPERS,
            )
    for env_id, suite in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="evolve_envs.registration:make_registered",
            vector_entry_point="evolve_envs.vector:make_vec",
            kwargs={"suite": suite},
            max_episode_steps=None,
            additional_wrappers=ID_WRAPPERS,
        )
