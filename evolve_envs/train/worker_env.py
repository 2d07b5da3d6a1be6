"""What a rollout worker builds: its env (the stack, its reward endpoint) and its policy.

:func:`make_worker_env` builds one env of a worker from the training config's stack blocks, with
``{node_ip}`` in ``reward_model.endpoint`` resolved to the worker's node
(:func:`resolve_node_endpoint`); :func:`reward_transport` says how the worker reaches the reward
service; :func:`policy_from_config` builds the policy replica; :func:`batch_obs` and
:func:`with_task` shape the observations the policy reads. The training loop's evaluation uses the
same builders, so evaluation envs are the workers' envs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, SupportsFloat

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from evolve_envs.stack.config import StackConfig
    from evolve_envs.train.config import PolicyConfig, TrainConfig
    from evolve_envs.train.policies.base import Policy

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
    """How worker ``worker_index`` reaches the reward service: ``handle:<app>`` (a Ray Serve
    ``DeploymentHandle``, no HTTP), the URL it posts to, ``embedded`` or ``off``.

    Example:
        >>> from evolve_envs.train.config import TrainConfig
        >>> reward_transport(TrainConfig(reward_model={"enable": True, "endpoint": "ray://reward"}))
        'handle:reward'
    """
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
    """One env as worker ``worker_index`` builds it: :func:`~evolve_envs.stack.factory.make_env` on
    the
    config's stack blocks (with the worker's ``env_overrides``; ``env.id`` is resolved there, as
    for every other path). The rewards are the stack's own (the success bonus among them), so
    ``gym.make``, ``make_vec``, ``rollout`` and the RLinf adapter pay the same for the same YAML.

    Example:
        >>> from evolve_envs.train.config import TrainConfig
        >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0"},
        ...                   reward_model={"enable": False})
        >>> env = make_worker_env(cfg)
        >>> env.action_space.shape
        (2,)
        >>> env.close()
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
    """The stack config worker ``worker_index`` builds its envs from: ``config.stack(i)``,
    except that a run which records its episodes (a ``record`` block) plays ``calls: deferred``
    with ``calls: async``: the recorder writes each step's reward and progress as the step
    returns, and ``async`` pays those same rewards then.

    Example:
        >>> from evolve_envs.train.config import TrainConfig
        >>> cfg = TrainConfig(reward_model={"enable": True, "calls": "deferred"},
        ...                   record={"dir": "runs/rec"})
        >>> worker_stack(cfg).reward_model.calls
        'async'
    """
    stack = config.stack(worker_index)
    rm = stack.reward_model
    if stack.record is not None and getattr(rm, "calls", None) == "deferred":
        async_rm = rm.model_copy(update={"calls": "async"})
        stack = stack.model_copy(update={"reward_model": async_rm})
    return stack


def policy_from_config(
    policy_cfg: PolicyConfig, obs_space: gym.Space, act_space: gym.Space
) -> Policy:
    """The policy for these spaces, from a :class:`~evolve_envs.train.config.PolicyConfig`.

    Without ``policy.target`` it is the CPU
    :class:`~evolve_envs.train.policies.base.CNNGaussianPolicy`
    (the other keys are its arguments). With ``target: "package.module:ClassName"`` that class
    (a :class:`~evolve_envs.train.policies.base.Policy` subclass) is built by its ``from_spaces(
    observation_space, action_space, **policy.kwargs)`` classmethod if it has one, else by
    ``ClassName(**policy.kwargs)``: the way a VLA plugs in without editing this package.
    """
    import importlib

    from evolve_envs.train.policies.base import CNNGaussianPolicy, Policy

    kwargs = policy_cfg.model_dump() if hasattr(policy_cfg, "model_dump") else dict(policy_cfg)
    target = kwargs.pop("target", None)
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
