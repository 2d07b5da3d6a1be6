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


def main(argv: list[str] | None = None) -> None:
    """``python -m evolve_envs.integrations.rlinf.launch SCRIPT [hydra args...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if args else 2)
    script = os.path.abspath(args[0])
    if not os.path.isfile(script):
        raise SystemExit(f"rlinf_launch: training script {script!r} not found")
    install()
    if not _cuda_available():
        from evolve_envs.integrations.rlinf.env_check import (
            EXIT_STOPPED_BEFORE_GPU_WORKERS,
            EnvCheckError,
            run_env_check,
        )

        try:
            report = run_env_check(args[1:])
        except EnvCheckError as exc:
            print(f"rlinf_launch (no CUDA device, env side only): {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        print(report.message(), file=sys.stderr, flush=True)
        raise SystemExit(EXIT_STOPPED_BEFORE_GPU_WORKERS)
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
