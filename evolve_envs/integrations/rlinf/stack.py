"""Building the RLinf adapter's reward side from a ``reward_model`` block: trackers and weights.

:func:`build_progress_stack` validates the block (the same schema and loading as ``make_env``)
and opens the reward model once for all sub-envs; :class:`ProgressStack` is what it returns, and
what :meth:`~evolve_envs.integrations.rlinf.adapter.RLinfProgressReward.from_config` wraps an env
with. :func:`reward_model_block` finds the block in an RLinf env config.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.hacking import HackingDetector
from evolve_envs.progress.settings import ConfigError
from evolve_envs.progress.tracker import ProgressTracker

__all__ = ["ProgressStack", "build_progress_stack", "reward_model_block"]


@dataclass
class ProgressStack:
    """Trackers and weights built from a ``reward_model`` block (:func:`build_progress_stack`).

    >>> stack = ProgressStack(trackers=[], reward_weight=1.0, env_reward_weight=0.0,
    ...                       on_close=[], config=None)
    >>> stack.reward_weight, stack.alarm
    (1.0, None)
    """

    trackers: list[ProgressTracker]
    reward_weight: float
    env_reward_weight: float
    on_close: list[Callable[[], Any]]
    config: Any
    alarm: HackingDetector | None = None


def reward_model_block(env_cfg: Any) -> Any | None:
    """The ``reward_model`` block of an RLinf env config (``env.train`` / ``env.eval``), or None."""
    if env_cfg is None:
        return None
    getter = getattr(env_cfg, "get", None)
    block = getter("reward_model", None) if callable(getter) else None
    return block


def build_progress_stack(
    reward_model: Any, num_envs: int, *, environ: Mapping[str, str] | None = None
) -> ProgressStack:
    """Validate a ``reward_model`` block and build one tracker per sub-env.

    The block is validated by :func:`evolve_envs.stack.loading.load_config` (unknown keys and wrong
    types are errors naming the key; the ``VLAC_*`` environment variables override it).
    The reward model is opened by :func:`evolve_envs.stack.reward_model.open_reward_model`, the
    builder
    ``make_env`` uses: one client serves all trackers, the service's capabilities are asked once
    and impossible settings are refused here, and a dead, refusing or foreign service fails here
    exactly as in ``make_env`` (``reward_model.require_service``). ``endpoint: embedded`` starts
    a local service (``embedded_backend``) owned by this stack (stopped by its ``on_close``).
    """
    from evolve_envs.stack.config import ProgressModelConfig
    from evolve_envs.stack.loading import load_config, reward_model_source
    from evolve_envs.stack.reward_model import open_reward_model

    cfg = load_config(reward_model_source(reward_model), environ=environ).reward_model
    if not cfg.enable:
        raise ConfigError("reward_model.enable: is false; nothing to install")
    if not isinstance(cfg, ProgressModelConfig):
        raise ConfigError(
            f"reward_model.kind: the RLinf integration supports 'progress', got {cfg.kind!r}"
        )
    with contextlib.ExitStack() as undo:  # a failure here closes the model again
        model = undo.enter_context(open_reward_model(cfg, max_workers=max(1, min(num_envs, 64))))
        audit = TerminationAudit()  # one run-wide count per task for all sub-envs
        trackers = [model.tracker(audit=audit) for _ in range(num_envs)]
        undo.pop_all()  # the stack owns the model now: closed by its on_close
    alarm = HackingDetector(cfg.alarm.detector_settings()) if cfg.alarm.enable else None
    return ProgressStack(
        trackers, cfg.reward_weight, cfg.env_reward_weight, [model.close], cfg, alarm=alarm
    )
