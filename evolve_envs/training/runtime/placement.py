"""Where a training run's parts go on a Ray cluster, and one line naming the key when no node
can ever hold one (docs/cluster.md).

Example:
    >>> from evolve_envs.training.config import TrainConfig
    >>> cfg = TrainConfig(workers={"num_cpus": 1, "resources": {"sim": 1}})
    >>> worker_request(cfg)
    {'CPU': 1.0, 'sim': 1.0}
    >>> unmet(worker_request(cfg), [{"CPU": 4.0}, {"CPU": 2.0, "sim": 2.0}])
    False
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from evolve_envs.training.config import TrainConfig

if TYPE_CHECKING:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = [
    "PlacementError",
    "check_placeable",
    "learner_request",
    "local_node",
    "on_this_node",
    "unmet",
    "worker_actor_options",
    "worker_request",
]


class PlacementError(RuntimeError):
    """No node of the cluster has the resources a part of the run asks for."""


def _request(num_cpus: float, num_gpus: float, resources: Mapping[str, float]) -> dict[str, float]:
    out = {"CPU": float(num_cpus), "GPU": float(num_gpus)}
    out.update({str(k): float(v) for k, v in resources.items()})
    return {k: v for k, v in out.items() if v > 0}


def worker_request(cfg: TrainConfig) -> dict[str, float]:
    """The Ray resources one rollout worker asks for."""
    w = cfg.workers
    return _request(w.num_cpus, w.num_gpus, w.resources)


def learner_request(cfg: TrainConfig) -> dict[str, float]:
    """The Ray resources the learner asks for (``placement: cluster``; in the driver it holds
    only its GPUs, see :func:`~evolve_envs.training.loop.reserve_learner_gpus`)."""
    c = cfg.learner
    return _request(c.num_cpus, c.num_gpus, c.resources)


def unmet(request: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> bool:
    """Whether no node's total resources cover ``request``."""
    return not any(all(node.get(k, 0.0) >= v for k, v in request.items()) for node in nodes)


def _alive_nodes() -> list[dict[str, float]]:
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def _describe(nodes: Sequence[Mapping[str, float]]) -> str:
    def one(node: Mapping[str, float]) -> str:
        keep = {
            k: v
            for k, v in node.items()
            if not k.startswith(("node:", "memory", "object_store_memory", "accelerator_type"))
        }
        return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"

    return "; ".join(one(n) for n in nodes) or "none"


def _key_name(block: str, resource: str) -> str:
    """The config key that asks for ``resource`` in ``block`` (``learner.num_gpus``)."""
    if resource == "CPU":
        return f"{block}.num_cpus"
    if resource == "GPU":
        return f"{block}.num_gpus"
    return f"{block}.resources.{resource}"


def _shortfall(
    request: Mapping[str, float], nodes: Sequence[Mapping[str, float]], block: str
) -> str:
    """Which key of ``request`` no node can meet, and the most any node has of it."""
    for name, value in request.items():
        most = max((float(node.get(name, 0.0)) for node in nodes), default=0.0)
        if most < value:
            return f"{_key_name(block, name)}={value:g}, the most {name} any node has is {most:g}"
    return "no single node has all of it at once"


def check_placeable(
    cfg: TrainConfig,
    nodes: Sequence[Mapping[str, float]] | None = None,
    *,
    where: str = "the Ray cluster",
) -> None:
    """Raise :class:`PlacementError` if no alive node can ever hold a rollout worker, or the
    learner (its CPUs, GPUs and resources with ``placement: cluster``; its GPUs alone with
    ``placement: driver``, which the driver reserves), in one line naming the key and what the
    nodes have (``nodes``: each node's total resources; default: the connected cluster's)."""
    nodes = _alive_nodes() if nodes is None else list(nodes)
    parts = [("a rollout worker", "workers", worker_request(cfg))]
    if cfg.learner.placement == "cluster":
        parts.append(("the learner", "learner", learner_request(cfg)))
    elif cfg.learner.num_gpus > 0:  # the driver's learner holds a placement group of its GPUs
        parts.append(("the learner", "learner", {"GPU": float(cfg.learner.num_gpus)}))
    for what, block, request in parts:
        if unmet(request, nodes):
            asked = ", ".join(f"{k}: {v:g}" for k, v in request.items())
            short = _shortfall(request, nodes, block)
            raise PlacementError(
                f"no node of {where} can hold {what} ({asked}): {short}; the nodes have"
                f" {_describe(nodes)}; lower {block}.num_cpus / num_gpus / resources, or run on"
                " nodes that have them (ray start --num-gpus N --resources '{...}'; --address)"
            )


def local_node(cfg: TrainConfig) -> dict[str, float] | None:
    """The resources of the local Ray ``evolve-envs train`` would start, or None when they cannot
    be told before Ray starts (then only the started Ray is checked)."""
    import os

    if os.environ.get("RAY_OVERRIDE_RESOURCES"):
        return None
    try:
        from ray._private.resource_and_label_spec import ResourceAndLabelSpec

        manager, count = ResourceAndLabelSpec._get_current_node_accelerator(None, {})
    except Exception:  # noqa: BLE001 - Ray's detection is internal: check after ray.init then
        return None
    node = {"CPU": float(cfg.ray.num_cpus or os.cpu_count() or 1)}
    if manager is not None:
        node[str(manager.get_resource_name())] = float(count)
    return node


def worker_actor_options(cfg: TrainConfig) -> dict[str, object]:
    """``ray.remote(...).options`` of the rollout workers: restartable, their resources, SPREAD
    with ``workers.scheduling: spread``."""
    w = cfg.workers
    options: dict[str, object] = {
        "max_restarts": w.max_restarts,
        "max_task_retries": -1,
        "num_cpus": w.num_cpus,
        "num_gpus": w.num_gpus,
    }
    if w.resources:
        options["resources"] = {str(k): float(v) for k, v in w.resources.items()}
    if w.scheduling == "spread":
        options["scheduling_strategy"] = "SPREAD"
    return options


def on_this_node() -> NodeAffinitySchedulingStrategy:
    """A scheduling strategy that keeps an actor on the node of the calling process."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
