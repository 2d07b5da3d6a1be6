"""The RLinf adapter's reward side from a ``reward_model`` block: trackers and weights
(:func:`build_progress_stack`), and telling our block from RLinf's (:func:`reward_model_block`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.hacking import HackingDetector
from evolve_envs.progress.tracker import ProgressTracker

if TYPE_CHECKING:
    from evolve_envs.stack.config import ProgressModelConfig

#: An RLinf config node: a mapping or an OmegaConf ``DictConfig`` (a mapping too)
Node = Mapping[str, object]

__all__ = [
    "ProgressStack",
    "build_progress_stack",
    "check_reward_switches",
    "enabled_block",
    "reward_model_block",
]

#: Keys that mark an ``env.*.reward_model`` block as ours (the stack config's ``enable``/``kind``).
OUR_KEYS = ("enable", "kind")
#: Keys of RLinf's own ``env.*.reward_model`` block: its world-model envs (``wan_libero_*``,
#: ``opensora_libero_*``) put their reward network there (``type: ResnetRewModel``, ...).
RLINF_WORLD_MODEL_KEYS = ("type", "from_pretrained")


@dataclass
class ProgressStack:
    """Trackers and weights built from a ``reward_model`` block (:func:`build_progress_stack`),
    which refuses a block it cannot serve before it opens anything:

    >>> build_progress_stack({"enable": True, "kind": "video_score"}, num_envs=2)
    Traceback (most recent call last):
    ...
    evolve_envs.progress.config_error.ConfigError: reward_model.kind: the RLinf integration \
supports 'progress', got 'video_score'
    """

    trackers: list[ProgressTracker]
    reward_weight: float
    env_reward_weight: float
    on_close: list[Callable[[], object]]
    config: ProgressModelConfig | None
    alarm: HackingDetector | None = None


def reward_model_block(env_cfg: Node | None, where: str = "env.train") -> Node | None:
    """Our ``reward_model`` block (one with ``enable`` or ``kind``), None for RLinf's world-model
    block (``type``, ``from_pretrained``); a mix of both is refused."""
    if env_cfg is None:
        return None
    getter = getattr(env_cfg, "get", None)
    block = getter("reward_model", None) if callable(getter) else None
    if block is None:
        return None
    keys = getattr(block, "keys", None)
    if not callable(keys):
        raise ConfigError(f"{where}.reward_model: expected a mapping, got {type(block).__name__}")
    names = {str(k) for k in keys()}
    ours = [k for k in OUR_KEYS if k in names]
    theirs = [k for k in RLINF_WORLD_MODEL_KEYS if k in names]
    if not ours:
        return None
    if theirs:
        raise ConfigError(
            f"{where}.reward_model: mixes RLinf's world-model keys ({', '.join(theirs)}) with "
            f"evolve-envs' keys ({', '.join(ours)}); RLinf's world-model reward network and the "
            "progress reward model cannot share one block: drop the evolve-envs keys, or RLinf's"
        )
    return block


def enabled_block(env_cfg: Node | None, where: str = "env.train") -> Node | None:
    """:func:`reward_model_block` when it is ours with ``enable: true``, else None."""
    block = reward_model_block(env_cfg, where)
    return block if block is not None and bool(block.get("enable", False)) else None


def check_reward_switches(cfg: Node) -> None:
    """Refuse ``reward.use_reward_model`` and ``env.train.reward_model.enable`` on together."""
    reward = cfg.get("reward", None) or {}
    env = cfg.get("env", None) or {}
    if not bool(reward.get("use_reward_model", False)):
        return
    if enabled_block(env.get("train", None), "env.train") is not None:
        raise ConfigError(
            "reward.use_reward_model and env.train.reward_model.enable are both true: RLinf's "
            "reward worker and the evolve-envs progress reward would both reward the same "
            'steps; set one of them to false (docs/rlinf.md, "Three ways to reward")'
        )


def build_progress_stack(
    reward_model: object, num_envs: int, *, environ: Mapping[str, str] | None = None
) -> ProgressStack:
    """One tracker per sub-env from a ``reward_model`` block (mapping, OmegaConf node or YAML
    path), validated and opened as ``make_env`` does; an embedded service is stopped on close."""
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
