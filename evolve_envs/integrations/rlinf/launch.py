"""Run an RLinf training script with :class:`ProgressEnvWorker` in place of RLinf's EnvWorker.

Points ``rlinf.workers.env.env_worker.EnvWorker`` at our worker, adds the installed RLinf's
``rlinf_layout``, refuses both reward switches on, and runs the script unchanged; without CUDA
it runs the env side only (:mod:`~evolve_envs.integrations.rlinf.env_check`, exit status 5).
``--cfg job`` prints the composed config and exits; ``rlinf_layout=...`` picks the other layout.

.. code-block:: bash

    python -m evolve_envs.integrations.rlinf.launch $EMBODIED_PATH/train_embodied_agent.py \\
        --config-path $PWD/evolve_envs/configs/rlinf --config-name libero_10_grpo_openvlaoft
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
