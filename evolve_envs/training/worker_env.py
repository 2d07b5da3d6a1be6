"""What a rollout worker builds from the run's typed config: its env, reward endpoint, policy.

>>> from evolve_envs.training.config import TrainConfig
>>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0"}, reward_model={"enable": False})
>>> env = make_worker_env(cfg)
>>> env.action_space.shape, reward_transport(cfg)
((2,), 'off')
>>> env.close()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, SupportsFloat

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from evolve_envs.stack.config import StackConfig
    from evolve_envs.training.config import PolicyConfig, TrainConfig
    from evolve_envs.training.policies.base import Policy

__all__ = [
    "NODE_IP",
    "Observation",
    "StepResult",
    "TASK_KEY",
    "batch_obs",
    "make_worker_env",
    "policy_from_config",
    "resolve_node_endpoint",
    "reward_transport",
    "with_task",
    "worker_stack",
]


#: A dict observation, as the workers' policies read it.
Observation = Mapping[str, object]
#: What ``env.step`` returns: observation, reward, terminated, truncated, info.
StepResult = tuple[Observation, SupportsFloat, bool, bool, dict[str, object]]


def batch_obs(observations: Sequence[Observation]) -> dict[str, np.ndarray]:
    """Stack single-env observation dicts into one batched dict (leading axis = env)."""
    return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in observations[0]}


#: Key under which workers add the env's ``info["task_description"]`` to a dict observation, so a
#: policy that conditions on the instruction (a VLA) finds it in :meth:`Policy.encode_obs`.
TASK_KEY = "task_description"


def with_task(obs: Observation, info: Mapping[str, object]) -> Observation:
    """``obs`` plus ``{TASK_KEY: info["task_description"]}`` for dict observations that lack it."""
    text = info.get("task_description")
    if text is None or not isinstance(obs, Mapping) or TASK_KEY in obs:
        return obs
    return {**obs, TASK_KEY: str(text)}


#: Placeholder in a ``reward_model.endpoint`` URL that a worker replaces with its node's IP
#: address: ``http://{node_ip}:8111`` reaches the Ray Serve proxy of the worker's own node.
NODE_IP = "{node_ip}"


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def resolve_node_endpoint(endpoint: str | list[str], node_ip: str | None = None) -> str | list[str]:
    """``endpoint`` with ``{node_ip}`` replaced by this node's IP address (lists item by item).

    Example:
        >>> resolve_node_endpoint("http://{node_ip}:8111", node_ip="10.0.0.7")
        'http://10.0.0.7:8111'
        >>> resolve_node_endpoint("ray://reward")
        'ray://reward'
    """
    if isinstance(endpoint, list):
        return [str(resolve_node_endpoint(e, node_ip)) for e in endpoint]
    if NODE_IP in endpoint:
        return endpoint.replace(NODE_IP, node_ip or _node_ip())
    return endpoint


def reward_transport(config: TrainConfig, worker_index: int = 0) -> str:
    """How worker ``worker_index`` reaches the service: ``handle:<app>``, a URL or ``off``."""
    from evolve_envs.reward.clients.ray_handle_pool import RAY_SCHEME, is_ray_endpoint

    rm = config.reward_model
    if not rm.enable:
        return "off"
    endpoint = rm.endpoint
    if is_ray_endpoint(endpoint):
        one = endpoint[0] if isinstance(endpoint, list) else endpoint
        return "handle:" + one[len(RAY_SCHEME) :].strip("/")
    endpoint = resolve_node_endpoint(endpoint)
    return ",".join(endpoint) if isinstance(endpoint, list) else str(endpoint)


def make_worker_env(config: TrainConfig, worker_index: int = 0) -> gym.Env:
    """One env of worker ``worker_index``: ``make_env`` on its typed stack config (not re-checked).

    ``{node_ip}`` in ``reward_model.endpoint`` becomes the worker's node (its Serve proxy).
    """
    from evolve_envs.stack.factory import make_env

    stack = worker_stack(config, worker_index)
    rm = stack.reward_model
    endpoint = resolve_node_endpoint(rm.endpoint)  # {node_ip}: the Serve proxy of this node
    if endpoint != rm.endpoint:
        stack = stack.model_copy(
            update={"reward_model": rm.model_copy(update={"endpoint": endpoint})}
        )
    return make_env(stack)


def worker_stack(config: TrainConfig, worker_index: int = 0) -> StackConfig:
    """The stack config worker ``worker_index`` builds its envs from: ``config.stack(i)``, as
    checked once when the run's config was loaded (a recording with ``calls: deferred`` is
    refused there, never rewritten here).

    Example:
        >>> from evolve_envs.training.config import TrainConfig
        >>> cfg = TrainConfig(reward_model={"enable": True, "calls": "deferred"})
        >>> worker_stack(cfg).reward_model.calls
        'deferred'
    """
    return config.stack(worker_index)


def policy_from_config(
    policy_cfg: PolicyConfig, obs_space: gym.Space, act_space: gym.Space
) -> Policy:
    """The policy for these spaces: the CPU ``CNNGaussianPolicy``, or ``policy.target``'s class.

    A ``target`` (``package.module:ClassName``, a ``Policy`` subclass) is built by its
    ``from_spaces(observation_space, action_space, **policy.kwargs)`` if it has one, else by
    ``ClassName(**policy.kwargs)``.
    """
    import importlib

    from evolve_envs.training.policies.base import CNNGaussianPolicy, Policy

    kwargs = policy_cfg.model_dump() if hasattr(policy_cfg, "model_dump") else dict(policy_cfg)
    target = kwargs.pop("target", None)
    kwargs.pop("init_from", None)  # the run's starting weights, not an argument of the class
    extra = dict(kwargs.pop("kwargs", None) or {})
    if target is None:
        return CNNGaussianPolicy.from_spaces(obs_space, act_space, **kwargs, **extra)
    module_name, _, attr = str(target).partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"policy.target: cannot import {target!r} ({exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"policy.target: {target!r} is not a subclass of Policy")
    if hasattr(cls, "from_spaces"):
        return cls.from_spaces(obs_space, act_space, **extra)
    return cls(**extra)
