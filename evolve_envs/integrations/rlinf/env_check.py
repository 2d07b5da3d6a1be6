"""The env side of an RLinf launch, for machines without a CUDA device.

An RLinf embodied training run (``train_embodied_agent.py``) starts three worker groups on Ray:
the actor (FSDP training of the policy, e.g. ``EmbodiedFSDPActor`` for OpenVLA-OFT), the rollout
workers (``MultiStepRolloutWorker``, the same policy generating actions) and the env workers
(``EnvWorker``, here :class:`~evolve_envs.integrations.rlinf.worker.ProgressEnvWorker`). The
actor and rollout workers load the policy's weights from ``actor.model.model_path`` and run on
CUDA GPUs; the env workers need neither. On a machine without CUDA, :func:`run_env_check` does
what the launch does up to and including the env workers, with RLinf's own code:

1. compose the Hydra config (``--config-path``, ``--config-name``, overrides, and the
   installed RLinf's layout: :mod:`~evolve_envs.integrations.rlinf.layout`), refuse RLinf's
   reward worker and ours on together, and run RLinf's ``validate_cfg``;
2. start RLinf's ``Cluster`` (Ray) and its ``HybridComponentPlacement``;
3. launch the ``ProgressEnvWorker`` group with the env placement and run ``init_worker``: each
   worker builds its envs (e.g. LIBERO) wrapped in the progress reward, which checks the reward
   service at start-up;
4. reset the envs and step them through one action chunk of zeros, so frames reach the reward
   service from the env workers;

and stops before the actor and rollout groups, which is where a CPU-only run has to stop.
:mod:`evolve_envs.integrations.rlinf.launch` calls it when ``torch.cuda.is_available()`` is
false; the launch then exits with status :data:`EXIT_STOPPED_BEFORE_GPU_WORKERS` and a message
saying so.

Example (starts RLinf's env workers, so not run as a doctest; tests/integrations/rlinf does)::

    >>> report = run_env_check(["--config-path", "evolve_envs/configs/rlinf",
    ...                         "--config-name", "my_config"])  # doctest: +SKIP
    >>> print(report.message())  # doctest: +SKIP
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EXIT_STOPPED_BEFORE_GPU_WORKERS",
    "EnvCheckError",
    "EnvCheckReport",
    "parse_hydra_args",
    "run_env_check",
]


class EnvCheckError(RuntimeError):
    """The env side of the launch failed; the message says at which stage."""


#: Exit status of a launch that stopped after the env workers for want of a CUDA device: the env
#: side worked, training did not start. Not 0 (nothing was trained) and not 3, which every
#: command of the project keeps for a reward service that cannot be used.
EXIT_STOPPED_BEFORE_GPU_WORKERS = 5


@dataclass
class EnvCheckReport:
    """What the env side of a launch started (see :func:`run_env_check`).

    >>> r = EnvCheckReport("EnvGroup", 1, [["ProgressReward", "LiberoEnv"]], "openvla_oft", "/m")
    >>> "stopped before the actor" in r.message()
    True
    """

    group_name: str
    num_workers: int
    env_stacks: list[list[str]]
    model_type: str
    model_path: str
    reward_endpoints: list[str] = field(default_factory=list)
    first_chunk: list[dict[str, Any]] = field(default_factory=list)

    def _chunk_summary(self) -> str:
        if not self.first_chunk:
            return "not run"
        parts = []
        for result in self.first_chunk:
            progress = ", ".join(f"{p:.1f}" for p in result["progress"])
            rewards = ", ".join(f"{r:.3f}" for r in result["rewards"])
            calls = result["reward_model_calls"]
            parts.append(f"progress [{progress}], rewards [{rewards}], reward-model calls {calls}")
        return "; ".join(parts)

    def message(self) -> str:
        """The explanation printed when the launch stops."""
        stacks = "; ".join(" > ".join(stack) for stack in self.env_stacks) or "none"
        endpoints = ", ".join(self.reward_endpoints) or "none (reward_model disabled)"
        return (
            f"rlinf_launch: no CUDA device, so the launch stopped before the actor and rollout "
            f"workers.\n"
            f"  started: {self.num_workers} ProgressEnvWorker(s) in group {self.group_name!r}; "
            f"envs built (outermost first): {stacks}\n"
            f"  reward_model.endpoint (checked at start-up): {endpoints}\n"
            f"  one chunk of zero actions after reset: {self._chunk_summary()}\n"
            f"  not started: the actor (FSDP training of {self.model_type!r}) and the rollout "
            f"workers, which load the policy from {self.model_path!r} and need CUDA GPUs. Run on "
            f"a GPU node to train."
        )


def parse_hydra_args(args: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """Split a Hydra command line into ``(config_path, config_name, overrides)``.

    >>> parse_hydra_args(["--config-path", "/c", "--config-name=x", "a.b=1"])
    ('/c', 'x', ['a.b=1'])
    """
    path = name = None
    overrides: list[str] = []
    it = iter(args)
    for arg in it:
        for flags, slot in ((("--config-path", "-cp"), "path"), (("--config-name", "-cn"), "name")):
            hit = next((f for f in flags if arg == f or arg.startswith(f + "=")), None)
            if hit is not None:
                value = arg.split("=", 1)[1] if "=" in arg else next(it, None)
                if value is None:
                    raise SystemExit(f"rlinf_launch: {hit} needs a value")
                if slot == "path":
                    path = value
                else:
                    name = value
                break
        else:
            if arg.startswith("-"):
                raise SystemExit(f"rlinf_launch: the CPU check does not take Hydra flag {arg!r}")
            overrides.append(arg)
    return path, name, overrides


def run_env_check(hydra_args: Sequence[str]) -> EnvCheckReport:
    """Compose, validate, start the cluster and the ``ProgressEnvWorker`` group, then stop.

    Ray is shut down before returning. A failure (bad config, unreachable reward service, an
    env that does not build, …) raises :class:`EnvCheckError` naming the stage.
    """
    config_path, config_name, overrides = parse_hydra_args(hydra_args)
    if not config_path or not config_name:
        raise SystemExit("rlinf_launch: the CPU check needs --config-path and --config-name")

    import ray

    from evolve_envs.integrations.rlinf.quiet_gym import import_gym_quietly

    import_gym_quietly()
    from rlinf.config import validate_cfg
    from rlinf.scheduler import Cluster
    from rlinf.utils.placement import HybridComponentPlacement

    from evolve_envs.integrations.rlinf.layout import compose, with_layout
    from evolve_envs.integrations.rlinf.stack import check_reward_switches, enabled_block
    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker

    stage = ["composing the config"]

    def worker_failed(sig: int, frame: Any) -> None:
        # RLinf's workers signal the driver (SIGUSR1) when one of their calls raises; they
        # print the error themselves. Stop here instead of in RLinf's exit handler.
        raise EnvCheckError(f"an env worker failed while {stage[0]} (its error is printed above)")

    try:
        overrides = with_layout(overrides, config_path=config_path, config_name=config_name)
        cfg = compose(config_path, config_name, overrides)
        check_reward_switches(cfg)
        stage[0] = "validating the config (RLinf's validate_cfg)"
        cfg = validate_cfg(cfg)  # RLinf's validation may already start Ray
        stage[0] = "starting RLinf's cluster"
        cluster = Cluster(cluster_cfg=cfg.cluster)
        signal.signal(signal.SIGUSR1, worker_failed)
        placement = HybridComponentPlacement(cfg, cluster)
        stage[0] = "launching the ProgressEnvWorker group"
        env_group = ProgressEnvWorker.create_group(cfg).launch(
            cluster,
            name=cfg.env.group_name,
            placement_strategy=placement.get_strategy("env"),
        )
        stage[0] = "building the envs and checking the reward service (init_worker)"
        env_group.init_worker().wait()
        stacks = env_group.env_stacks().wait()
        stage[0] = "stepping one chunk"
        model = cfg.actor.model
        chunks = env_group.check_chunk(
            int(model.get("num_action_chunks", 1)), int(model.get("action_dim", 7))
        ).wait()
    except EnvCheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported with the stage it happened in
        raise EnvCheckError(f"failed while {stage[0]}: {type(exc).__name__}: {exc}") from exc
    finally:
        ray.shutdown()
    block = enabled_block(cfg.env.train)
    endpoints = block.get("endpoint") if block is not None else None
    if isinstance(endpoints, str):
        endpoints = [endpoints]
    return EnvCheckReport(
        group_name=str(cfg.env.group_name),
        num_workers=len(stacks),
        env_stacks=[stack for worker in stacks for stack in worker],
        model_type=str(cfg.actor.model.model_type),
        model_path=str(cfg.actor.model.model_path),
        reward_endpoints=[str(e) for e in endpoints or []],
        first_chunk=[result for worker in chunks for result in worker],
    )
