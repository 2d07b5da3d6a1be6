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
key and what the nodes have instead of an actor that waits forever. A run that starts its own
local Ray is checked before Ray starts, against :func:`local_node` (the CPUs it will give Ray and
the GPUs Ray detects here), so ``learner.num_gpus=1`` on a machine without one is refused at once.

Example:
    >>> from evolve_envs.train.config import TrainConfig
    >>> cfg = TrainConfig(workers={"num_cpus": 1, "resources": {"sim": 1}})
    >>> worker_request(cfg)
    {'CPU': 1.0, 'sim': 1.0}
    >>> unmet(worker_request(cfg), [{"CPU": 4.0}, {"CPU": 2.0, "sim": 2.0}])
    False
    >>> unmet({"CPU": 1.0, "learner": 1.0}, [{"CPU": 4.0}])
    True
    >>> try:
    ...     check_placeable(TrainConfig(learner={"num_gpus": 1}), [{"CPU": 2.0}])
    ... except PlacementError as exc:
    ...     print(str(exc).split("): ", 1)[1].split(";")[0])
    learner.num_gpus=1, the most GPU any node has is 0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evolve_envs.train.config import TrainConfig

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
    """The resources of the local Ray that ``evolve-envs train`` would start (``ray.num_cpus``
    CPUs, the accelerators Ray detects on this machine, no custom resources), or None when they
    cannot be told before Ray starts (``RAY_OVERRIDE_RESOURCES`` set, or Ray's detection
    unavailable): then :func:`check_placeable` runs on the started Ray only.

    Example:
        >>> node = local_node(TrainConfig(ray={"num_cpus": 2}))
        >>> node is None or node["CPU"] == 2.0
        True
    """
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
