"""Where a training run's parts go on a Ray cluster, and a clear error when they cannot go.

A config names what each part needs as Ray resources:

* rollout workers: ``workers.num_cpus``, ``workers.num_gpus`` and ``workers.resources`` (custom
  node resources such as ``{sim: 1}``), spread across nodes with ``workers.scheduling: spread``;
* the learner (``learner.placement: cluster``): ``learner.num_cpus``, ``learner.num_gpus`` and
  ``learner.resources`` (for example ``{learner: 1}``);
* the weight registry and the trajectory queue: always the learner's node
  (:func:`on_this_node`), so losing any other node never loses them.

Nodes advertise custom resources when they start: ``ray start --address HEAD:6379 --resources
'{"sim": 4}'``. :func:`check_placeable` compares each part's request with every alive node's
total resources before anything starts, so a request no node can ever meet is one line naming the
part and the nodes instead of an actor that waits forever.

Example:
    >>> from evolve_envs.train.config import TrainConfig
    >>> cfg = TrainConfig(workers={"num_cpus": 1, "resources": {"sim": 1}})
    >>> worker_request(cfg)
    {'CPU': 1.0, 'sim': 1.0}
    >>> unmet(worker_request(cfg), [{"CPU": 4.0}, {"CPU": 2.0, "sim": 2.0}])
    False
    >>> unmet({"CPU": 1.0, "learner": 1.0}, [{"CPU": 4.0}])
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evolve_envs.train.config import TrainConfig

__all__ = [
    "PlacementError",
    "check_placeable",
    "learner_request",
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
    only its GPUs, see :func:`~evolve_envs.train.loop.reserve_learner_gpus`)."""
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


def check_placeable(cfg: TrainConfig, nodes: Sequence[Mapping[str, float]] | None = None) -> None:
    """Raise :class:`PlacementError` if no alive node can ever hold a rollout worker, or the
    learner with ``placement: cluster`` (``nodes``: each node's total resources; default: the
    connected cluster's)."""
    nodes = _alive_nodes() if nodes is None else list(nodes)
    parts = [("a rollout worker", "workers", worker_request(cfg))]
    if cfg.learner.placement == "cluster":
        parts.append(("the learner", "learner", learner_request(cfg)))
    for what, block, request in parts:
        if unmet(request, nodes):
            asked = ", ".join(f"{k}: {v:g}" for k, v in request.items())
            raise PlacementError(
                f"no node of the Ray cluster can hold {what} ({asked}); the nodes have "
                f"{_describe(nodes)}; start a node with these resources (ray start --resources "
                f"'{{...}}') or lower {block}.num_cpus / num_gpus / resources"
            )


def worker_actor_options(cfg: TrainConfig) -> dict[str, Any]:
    """``ray.remote(...).options`` of the rollout-worker actors: restartable, their resources,
    and Ray's SPREAD strategy with ``workers.scheduling: spread``.

    Example:
        >>> opts = worker_actor_options(TrainConfig(workers={"scheduling": "spread"}))
        >>> opts["scheduling_strategy"], opts["max_task_retries"]
        ('SPREAD', -1)
    """
    w = cfg.workers
    options: dict[str, Any] = {
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


def on_this_node() -> Any:
    """A scheduling strategy that keeps an actor on the node of the calling process."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
