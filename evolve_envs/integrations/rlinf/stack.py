"""Building the RLinf adapter's reward side from a ``reward_model`` block: trackers and weights.

:func:`build_progress_stack` validates the block (the same schema and loading as ``make_env``)
and opens the reward model once for all sub-envs; :class:`ProgressStack` is what it returns, and
what :meth:`~evolve_envs.integrations.rlinf.adapter.RLinfProgressReward.from_config` wraps an env
with. :func:`reward_model_block` finds our block in an RLinf env config (never RLinf's own
world-model ``reward_model`` block), and :func:`check_reward_switches` refuses a config that turns
on both RLinf's reward worker and ours.
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


def reward_model_block(env_cfg: Any, where: str = "env.train") -> Any | None:
    """Our ``reward_model`` block of an RLinf env config (``env.train`` / ``env.eval``), or None.

    A block is ours when it has an ``enable`` or ``kind`` key. RLinf's world-model envs keep
    their own reward network under the same name (``type``, ``from_pretrained``); such a block
    is RLinf's and is left to RLinf (None). A block with keys of both is refused.

    >>> reward_model_block({"reward_model": {"enable": True, "endpoint": "http://h:1"}})
    {'enable': True, 'endpoint': 'http://h:1'}
    >>> reward_model_block({"reward_model": {"type": "ResnetRewModel", "from_pretrained": "x"}})
    >>> reward_model_block({"reward_model": {"type": "ResnetRewModel", "enable": True}})
    Traceback (most recent call last):
    ...
    evolve_envs.progress.settings.ConfigError: env.train.reward_model: mixes RLinf's ...
    """
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


def enabled_block(env_cfg: Any, where: str = "env.train") -> Any | None:
    """:func:`reward_model_block` when it is ours and ``enable`` is true, else None.

    >>> enabled_block({"reward_model": {"enable": False}}) is None
    True
    """
    block = reward_model_block(env_cfg, where)
    return block if block is not None and bool(block.get("enable", False)) else None


def check_reward_switches(cfg: Any) -> None:
    """Refuse RLinf's reward worker (``reward.use_reward_model``) and our progress reward
    (``env.train.reward_model.enable``) on together: both would reward the same steps.

    >>> check_reward_switches({"reward": {"use_reward_model": False},
    ...                        "env": {"train": {"reward_model": {"enable": True}}}})
    >>> check_reward_switches({"reward": {"use_reward_model": True},
    ...                        "env": {"train": {"reward_model": {"enable": True}}}})
    Traceback (most recent call last):
    ...
    evolve_envs.progress.settings.ConfigError: reward.use_reward_model and env.train.reward_model...
    """
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
