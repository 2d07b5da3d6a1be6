"""Sub-env resets under RLinf's auto-reset: which sub-envs reset, and resetting those only the
reward model ended as RLinf's LIBERO env resets its own (:func:`reset_ended`)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.training.common.arrays import to_numpy

__all__ = [
    "check_resets_sub_envs",
    "env_success_flags",
    "final_mask",
    "reset_ended",
    "reset_indices",
]


def reset_indices(env_idx: object, num_envs: int) -> list[int]:
    """The sub-envs a ``reset(env_idx)`` resets: all for ``None``, else the indices or mask."""
    if env_idx is None:
        return list(range(num_envs))
    arr = to_numpy(env_idx)
    if arr.dtype == bool:
        return [int(i) for i in np.flatnonzero(arr)]
    return [int(i) for i in np.atleast_1d(arr)]


def final_mask(infos: Mapping[str, object], n: int) -> np.ndarray:
    """Which sub-envs were auto-reset in this step (``infos["_final_observation"]``), shape (n,)."""
    mask = to_numpy(infos.get("_final_observation", np.zeros(n, dtype=bool)), bool)
    return mask.any(axis=-1) if mask.ndim > 1 else mask


def check_resets_sub_envs(env: object) -> None:
    """Refuse an auto-resetting env whose sub-envs the model could end but not reset."""
    fix = "set reward_model.terminate_on_done: false or env auto_reset: false"
    if bool(getattr(env, "is_eval", False)):
        raise ConfigError(
            f"{type(env).__name__} is an evaluation env (is_eval) that auto-resets: a sub-env "
            f"the reward model ends mid-chunk would not be reset from the evaluation states; {fix}"
        )
    reset = getattr(env, "reset", None)
    try:
        params = inspect.signature(reset).parameters if callable(reset) else {}
    except (TypeError, ValueError):  # no signature to read: trust the documented shape
        return
    kinds = {p.kind for p in params.values()}
    if "env_idx" not in params and inspect.Parameter.VAR_KEYWORD not in kinds:
        raise ConfigError(
            f"{type(env).__name__} auto-resets but has no reset(env_idx=..., reset_state_ids=...), "
            f"so a sub-env the reward model ends mid-chunk cannot be reset; {fix}"
        )


def env_success_flags(infos_list: list[object], n: int) -> list[np.ndarray | None]:
    """Per-step env success flags (``episode.success_once``); ``None`` where the env has none."""
    out: list[np.ndarray | None] = []
    for infos in infos_list:
        flags = None
        if isinstance(infos, Mapping):
            for holder in (infos, infos.get("final_info")):
                ep = holder.get("episode") if isinstance(holder, Mapping) else None
                if isinstance(ep, Mapping) and "success_once" in ep:
                    flags = to_numpy(ep["success_once"], bool).reshape(-1)
                    break
        out.append(flags if flags is not None and flags.shape == (n,) else None)
    return out


def reset_ended(env: Any, mask: np.ndarray, last_obs: Any, last_infos: Any) -> tuple[Any, Any]:
    """Reset the sub-envs in ``mask`` as the env resets its own after a chunk; returns the new
    last observation and infos, with ``final_observation`` / ``final_info`` for them."""
    last_infos = dict(last_infos) if isinstance(last_infos, Mapping) else {}
    prior = final_mask(last_infos, len(mask))
    had_final = "final_observation" in last_infos
    ended_obs = copy.deepcopy(last_obs)
    ended_info = last_infos["final_info"] if had_final else copy.deepcopy(last_infos)
    env_idx = np.flatnonzero(mask)
    reset_ids = None
    if bool(getattr(env, "use_fixed_reset_state_ids", False)):
        env.update_reset_state_ids()
        reset_ids = np.asarray(env.reset_state_ids)[env_idx]
    obs, reset_infos = env.reset(env_idx=env_idx, reset_state_ids=reset_ids)
    new_infos = dict(reset_infos)
    if had_final:
        # Keep the terminal observations of sub-envs the env itself reset in this chunk.
        final_obs = copy.copy(last_infos["final_observation"])
        for key, value in ended_obs.items():
            if key in final_obs and hasattr(value, "__getitem__") and hasattr(value, "shape"):
                final_obs[key][env_idx] = value[env_idx]
    else:
        final_obs = ended_obs
    new_infos["final_observation"] = final_obs
    new_infos["final_info"] = ended_info
    both = prior | mask
    new_infos["_final_observation"] = both
    new_infos["_final_info"] = both
    new_infos["_elapsed_steps"] = both
    return obs, new_infos
