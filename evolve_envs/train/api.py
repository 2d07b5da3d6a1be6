"""``evolve_envs.train(config, ...)``: a training run from Python, as ``evolve-envs train`` runs it.

The config is a shipped training config's name (``"distrl/reach_place"``), a YAML path, a mapping
or a :class:`~evolve_envs.train.config.TrainConfig`; keyword arguments override its keys, a block
at a time (``learner={"lr": 1e-3}``, merged into the block) or by dotted path
(``**{"learner.lr": 1e-3}``). The run is :func:`evolve_envs.train.driver.run_train`'s: Ray, the
embedded reward service, the run folder, the checkpoints. It returns a
:class:`~evolve_envs.train.driver.TrainResult`: the run folder, the counters, the final held-out
success (``None`` without ``eval``), the paths of ``checkpoint.pt`` and ``best.pt``; a trained
policy comes back with :func:`evolve_envs.load_policy`.

Example (a run of two updates on ReachPlace, about half a minute)::

    import evolve_envs

    result = evolve_envs.train("distrl/reach_place", run_dir="runs/rp", run={"max_updates": 2})
    result.counters["updates"], result.checkpoint   # (2, PosixPath('runs/rp/checkpoint.pt'))

>>> nested_overrides({"algo": "grpo", "learner.lr": 1e-3, "run": {"minutes": 1}})
{'algo': 'grpo', 'learner': {'lr': 0.001}, 'run': {'minutes': 1}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from evolve_envs.stack.loading import merge
from evolve_envs.train.config import TrainConfig, TrainSource
from evolve_envs.train.driver import TrainOptions, TrainResult, run_train

__all__ = ["nested_overrides", "train"]

#: What :func:`train` takes for a config.
ConfigSource = str | os.PathLike[str] | TrainConfig | Mapping[str, object]


def nested_overrides(overrides: Mapping[str, object]) -> dict[str, object]:
    """Keyword overrides as one nested mapping: a dotted key (``"learner.lr"``) becomes nested
    blocks; blocks given twice are merged (see the module's example)."""
    out: dict[str, object] = {}
    for key, value in overrides.items():
        for part in reversed(key.split(".")):
            value = {part: value}
        out = merge(out, value)
    return out


def train(
    config: ConfigSource | None = None,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    minutes: float | None = None,
    resume: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    address: str | None = None,
    log: TextIO | None = None,
    **overrides: object,
) -> TrainResult:
    """Train a policy; returns where the run wrote and how far it got.

    Args:
        config: the training config (a shipped name, a YAML path, a mapping, a ``TrainConfig``);
            ``None`` with ``resume`` continues the run's own config.
        run_dir: the run folder (default ``runs/train-ALGO-DATE-TIME``).
        minutes: the wall-clock budget (``run.minutes``).
        resume: a run folder to continue (its ``checkpoint.pt``; ``config`` and ``overrides``
            are layered on its config).
        overwrite: replace a run already in ``run_dir`` (else such a folder is refused).
        address: a Ray cluster to join (default: a Ray already initialised here, else a local
            one).
        log: where the per-interval lines go (default ``sys.stderr``).
        **overrides: config keys, by block (``run={"max_updates": 10}``) or dotted path.

    Raises :class:`~evolve_envs.progress.settings.ConfigError` naming a bad key before
    anything starts (see the module's example).
    """
    if config is None and resume is None:
        raise ValueError(
            "train() needs a config (a shipped name such as 'distrl/reach_place', a YAML path, "
            "a mapping or a TrainConfig), or resume=RUN_DIR to continue a run"
        )
    sources: list[TrainSource] = [] if config is None else [config]
    if overrides:
        sources.append(nested_overrides(overrides))
    opts = TrainOptions(
        config=sources,
        address=address,
        resume=resume,
        run_dir=run_dir,
        minutes=minutes,
        overwrite=overwrite,
        progress_bar=False,
        log=log,
    )
    return run_train(opts)
