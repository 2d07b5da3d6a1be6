"""Run an RLinf training script with :class:`ProgressEnvWorker` in place of RLinf's EnvWorker.

RLinf's launch scripts (e.g. ``examples/embodiment/train_embodied_agent.py``) import
``EnvWorker`` from ``rlinf.workers.env.env_worker`` and start it as the env worker group. This
launcher points that name at :class:`~evolve_envs.integrations.rlinf.worker.ProgressEnvWorker`
and then runs the script unchanged, with the remaining arguments (Hydra's):

.. code-block:: bash

    export EMBODIED_PATH=/path/to/RLinf/examples/embodiment
    python -m evolve_envs.integrations.rlinf.launch \\
        $EMBODIED_PATH/train_embodied_agent.py \\
        --config-path $PWD/evolve_envs/configs/rlinf --config-name libero_10_grpo_openvlaoft

Nothing in RLinf is modified on disk. The worker class travels to Ray workers by reference, so
``evolve-envs`` must be installed on every node (it is a normal pip package).

The launcher adds ``rlinf_layout=<the installed RLinf's>`` to the overrides of a config that
selects RLinf's layout (ours do; :mod:`~evolve_envs.integrations.rlinf.layout`), unless the
command line names one. Before anything starts it composes the config and refuses one that turns
on both RLinf's reward worker and our progress reward (one line, exit status 1).

``--cfg job`` (Hydra's flag) is the compose step alone: the launcher composes the config as the
launch would, prints it and exits (status 0), with or without a CUDA device.

Without a CUDA device (``torch.cuda.is_available()`` false) the script is not run: RLinf's actor
and rollout workers load the policy and need CUDA GPUs. The launcher then does the launch's env
side with RLinf's own code (compose and validate the config, start the cluster, launch and
initialise the ``ProgressEnvWorker`` group, see :mod:`~evolve_envs.integrations.rlinf.env_check`),
prints what it started and where it stopped, and exits with status 5 (the env side works;
nothing was trained). A failure on the env side exits 1 with the stage named.
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ["main", "install"]


def install() -> type:
    """Make ``rlinf.workers.env.env_worker.EnvWorker`` resolve to ``ProgressEnvWorker``."""
    from evolve_envs.integrations.rlinf.quiet_gym import import_gym_quietly

    import_gym_quietly()
    import rlinf.workers.env.env_worker as env_worker_module

    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker

    env_worker_module.EnvWorker = ProgressEnvWorker
    return ProgressEnvWorker


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _split_cfg_flag(args: list[str]) -> tuple[str | None, list[str]]:
    """``(value of --cfg/-c or None, the other arguments)``."""
    rest, value = [], None
    it = iter(args)
    for arg in it:
        for flag in ("--cfg", "-c"):
            if arg == flag:
                value = next(it, "")
                break
            if arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
                break
        else:
            rest.append(arg)
    return value, rest


def _compose_checked(hydra_args: list[str]):  # noqa: ANN202 - an OmegaConf DictConfig
    """Compose the config and refuse both reward switches on (ConfigError, ValueError, ...)."""
    from evolve_envs.integrations.rlinf.env_check import parse_hydra_args
    from evolve_envs.integrations.rlinf.layout import compose
    from evolve_envs.integrations.rlinf.stack import check_reward_switches

    config_path, config_name, overrides = parse_hydra_args(hydra_args)
    if not config_path or not config_name:
        raise SystemExit("rlinf_launch: composing the config needs --config-path and --config-name")
    cfg = compose(config_path, config_name, overrides)
    check_reward_switches(cfg)
    return cfg


def _config_args(hydra_args: list[str]) -> tuple[str | None, str | None]:
    """``(--config-path, --config-name)`` of a Hydra command line (None, None: not readable)."""
    from evolve_envs.integrations.rlinf.env_check import parse_hydra_args

    try:
        config_path, config_name, _ = parse_hydra_args(hydra_args)
    except SystemExit:  # Hydra flags this launcher does not read: leave the line to the script
        return None, None
    return config_path, config_name


def main(argv: list[str] | None = None) -> None:
    """``python -m evolve_envs.integrations.rlinf.launch SCRIPT [hydra args...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if args else 2)
    script = os.path.abspath(args[0])
    if not os.path.isfile(script):
        raise SystemExit(f"rlinf_launch: training script {script!r} not found")
    cfg_flag, hydra_args = _split_cfg_flag(args[1:])
    if cfg_flag is not None and cfg_flag != "job":
        raise SystemExit(f"rlinf_launch: --cfg job is the compose step; got --cfg {cfg_flag!r}")
    config_path, config_name = _config_args(hydra_args)
    if config_path and config_name:
        from evolve_envs.integrations.rlinf.layout import with_layout

        hydra_args = with_layout(hydra_args, config_path=config_path, config_name=config_name)
    if cfg_flag is not None or (config_path and config_name):
        try:
            cfg = _compose_checked(hydra_args)
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001 - one line naming the cause, no traceback
            first = (str(exc).strip().splitlines() or [""])[0]
            refused = f"rlinf_launch: the config was refused: {type(exc).__name__}: {first}"
            print(refused, file=sys.stderr)
            raise SystemExit(1) from None
        if cfg_flag is not None:
            from omegaconf import OmegaConf

            print(OmegaConf.to_yaml(cfg), end="", flush=True)
            raise SystemExit(0)
    install()
    if not _cuda_available():
        from evolve_envs.integrations.rlinf.env_check import (
            EXIT_STOPPED_BEFORE_GPU_WORKERS,
            EnvCheckError,
            run_env_check,
        )

        try:
            report = run_env_check(hydra_args)
        except EnvCheckError as exc:
            print(f"rlinf_launch (no CUDA device, env side only): {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        print(report.message(), file=sys.stderr, flush=True)
        raise SystemExit(EXIT_STOPPED_BEFORE_GPU_WORKERS)
    sys.argv = [script, *hydra_args]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
