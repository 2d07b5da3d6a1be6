"""``evolve_envs.train(config, ...)``: a training run from Python, as ``evolve-envs train`` runs it.

The config (a shipped name, a YAML path, a mapping or a ``TrainConfig``) is read and checked once;
keyword arguments override its keys by block or dotted path (docs/training.md, "From Python").

>>> nested_overrides({"algo": "grpo", "grpo.lr": 1e-3, "run": {"minutes": 1}})
{'algo': 'grpo', 'grpo': {'lr': 0.001}, 'run': {'minutes': 1}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from evolve_envs.stack.loading import merge
from evolve_envs.training.config import TrainConfig, TrainSource
from evolve_envs.training.driver import TrainOptions, TrainResult, run_train

__all__ = ["nested_overrides", "train"]

#: What :func:`train` takes for a config.
ConfigSource = str | os.PathLike[str] | TrainConfig | Mapping[str, object]


def nested_overrides(overrides: Mapping[str, object]) -> dict[str, object]:
    """Keyword overrides as one nested mapping: a dotted key (``"distrl.lr"``) becomes nested
    blocks; blocks given twice are merged (see the module's example). Each algorithm reads its
    own block: under ``algo: grpo`` the rate is ``grpo.lr`` (``distrl.lr`` is refused)."""
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
    trust_checkpoint: bool = False,
    **overrides: object,
) -> TrainResult:
    """Train a policy; returns where the run wrote and how far it got (a ``TrainResult``).

    ``config``: ``None`` with ``resume`` continues the run's own config; ``resume``: a run folder to
    continue (``config`` and ``overrides`` layered on its config); ``overwrite``: replace a run in
    ``run_dir``; ``address``: a Ray cluster to join; ``trust_checkpoint``: let ``resume`` open an
    older ``checkpoint.pt`` whose pickle needs the full unpickler (it can run code: only a run
    you trust; docs/security.md); ``**overrides``: config keys, by block
    (``run={"max_updates": 10}``) or dotted path. A bad key raises ``ConfigError`` before anything
    starts.
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
        trust_checkpoint=trust_checkpoint,
    )
    return run_train(opts)
