"""A small vectorised env with the interface of RLinf's ``LiberoEnv`` and painted frames.

It follows the documented behaviour of RLinf's LIBERO env (``rlinf/envs/libero/libero_env.py``)
on everything :class:`evolve_envs.integrations.rlinf.adapter.RLinfProgressReward` and RLinf's
``EnvWorker`` touch, without a simulator:

* constructor ``(cfg, num_envs, seed_offset, total_num_processes, worker_info)``;
* ``reset(env_idx=None, reset_state_ids=None) -> (obs, {})`` with ``is_start`` semantics,
  ``update_reset_state_ids()`` (``group_size`` consecutive envs share an id), ``reset_state_ids``;
* ``step(actions, auto_reset=True)`` and ``chunk_step(actions[N, C, A])`` returning torch tensors;
  in ``chunk_step`` sub-envs keep stepping after an end inside the chunk, auto-reset happens after
  the chunk, and with ``auto_reset`` or ``ignore_terminations`` the end is reported on the chunk's
  last action only; ``infos["final_observation"]``, ``final_info``, ``_final_observation`` etc.
  after an auto-reset; ``ignore_terminations`` clears terminations and records
  ``episode.success_at_end``;
* observation keys ``main_images`` (uint8 ``[N, S, S, 3]``), ``wrist_images``, ``states``,
  ``task_descriptions``; ``infos["episode"]`` with ``success_once``, ``return``, ``episode_len``;
* LIBERO's reward: ``reward_coef * success`` (relative to the previous step with
  ``use_rel_reward``).

Dynamics: each sub-env holds an integer progress ``p`` (0 after reset). An action's first
component ``a`` moves it by ``round(a * progress_per_action)``, clipped to [0, 100]. The frame is
painted uniformly with grey level ``round(p * 255 / 100)``, which the mock reward service
(*intensity* rule) reads back as ``p``. The simulator "succeeds" while ``p >= success_at``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

__all__ = ["StandinLiberoEnv", "grey", "standin_cfg"]


def grey(progress: float) -> int:
    """Grey level the intensity rule reads back as ``progress``."""
    return int(np.floor(float(progress) * 255.0 / 100.0 + 0.5))


def standin_cfg(**overrides: Any) -> dict[str, Any]:
    """A config with LiberoEnv's keys (plus the stand-in's own) and test-friendly defaults."""
    cfg = {
        "seed": 0,
        "group_size": 1,
        "auto_reset": False,
        "ignore_terminations": False,
        "max_episode_steps": 64,
        "use_fixed_reset_state_ids": True,
        "use_rel_reward": True,
        "reward_coef": 5.0,
        "num_tasks": 3,
        "num_init_states": 12,
        "image_size": 16,
        "progress_per_action": 10,
        "success_at": 100,
    }
    cfg.update(overrides)
    return cfg


class _Cfg(dict):
    """Dict with attribute access and ``get`` (enough of OmegaConf's DictConfig)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class StandinLiberoEnv:
    """Stand-in for RLinf's vectorised ``LiberoEnv`` (see module docstring)."""

    def __init__(
        self,
        cfg: Any,
        num_envs: int,
        seed_offset: int = 0,
        total_num_processes: int = 1,
        worker_info: Any = None,
    ) -> None:
        self.cfg = cfg if hasattr(cfg, "get") and hasattr(cfg, "auto_reset") else _Cfg(cfg)
        c = self.cfg
        self.num_envs = int(num_envs)
        self.seed_offset = seed_offset
        self.total_num_processes = total_num_processes
        self.worker_info = worker_info
        self.seed = int(c.get("seed", 0)) + seed_offset
        self.group_size = int(c.get("group_size", 1))
        self.num_group = self.num_envs // self.group_size
        self.auto_reset = bool(c.auto_reset)
        self.ignore_terminations = bool(c.ignore_terminations)
        self.use_fixed_reset_state_ids = bool(c.get("use_fixed_reset_state_ids", True))
        self.video_cfg = c.get("video_cfg", None)
        self._rng = np.random.default_rng(self.seed)
        self._is_start = True
        self.size = int(c.get("image_size", 16))
        self.metadata = {"render_fps": 10}
        self.progress = np.zeros(self.num_envs, dtype=np.int64)
        self._elapsed_steps = np.zeros(self.num_envs, dtype=np.int32)
        self.prev_step_reward = np.zeros(self.num_envs)
        self.success_once = np.zeros(self.num_envs, dtype=bool)
        self.returns = np.zeros(self.num_envs)
        self.update_reset_state_ids_calls = 0
        self.flush_video_calls = 0
        self.reset_calls: list[list[int]] = []
        self.update_reset_state_ids()
        self.update_reset_state_ids_calls = 0
        self.task_ids = np.zeros(self.num_envs, dtype=np.int64)
        self._set_tasks(self.reset_state_ids, np.arange(self.num_envs))

    # -------------------------------------------------------------- RLinf-facing attributes
    @property
    def is_start(self) -> bool:
        return self._is_start

    @is_start.setter
    def is_start(self, value: bool) -> None:
        self._is_start = value

    @property
    def elapsed_steps(self) -> np.ndarray:
        return self._elapsed_steps

    def update_reset_state_ids(self) -> None:
        ids = self._rng.integers(0, int(self.cfg.get("num_init_states", 12)), size=self.num_group)
        self.reset_state_ids = ids.repeat(self.group_size)
        self.update_reset_state_ids_calls += 1

    def flush_video(self, video_sub_dir: str | None = None) -> None:
        self.flush_video_calls += 1

    def _set_tasks(self, reset_state_ids: np.ndarray, env_idx: np.ndarray) -> None:
        n_tasks = int(self.cfg.get("num_tasks", 3))
        for j, i in enumerate(env_idx):
            self.task_ids[i] = int(reset_state_ids[j]) % n_tasks
        self.task_descriptions = [f"stand-in task {int(k)}" for k in self.task_ids]

    # -------------------------------------------------------------- observations and rewards
    def _obs(self) -> dict[str, Any]:
        levels = np.array([grey(p) for p in self.progress], dtype=np.uint8)
        images = np.broadcast_to(
            levels[:, None, None, None], (self.num_envs, self.size, self.size, 3)
        ).copy()
        states = np.zeros((self.num_envs, 8), dtype=np.float32)
        states[:, 0] = self.progress
        return {
            "main_images": torch.from_numpy(images),
            "wrist_images": torch.zeros_like(torch.from_numpy(images)),
            "states": torch.from_numpy(states),
            "task_descriptions": list(self.task_descriptions),
        }

    def _step_reward(self, terminations: np.ndarray) -> np.ndarray:
        reward = float(self.cfg.get("reward_coef", 5.0)) * terminations
        if self.cfg.get("use_rel_reward", True):
            diff = reward - self.prev_step_reward
            self.prev_step_reward = reward
            return diff
        return reward

    def _episode_info(self, step_reward: np.ndarray, terminations: np.ndarray) -> dict[str, Any]:
        self.returns += step_reward * (~self.success_once)
        self.success_once |= terminations
        return {
            "success_once": torch.from_numpy(self.success_once.copy()),
            "return": torch.from_numpy(self.returns.astype(np.float32)),
            "episode_len": torch.from_numpy(self._elapsed_steps.copy()),
        }

    # -------------------------------------------------------------- reset and step
    def reset(self, env_idx: Any = None, reset_state_ids: Any = None):
        env_idx = np.arange(self.num_envs) if env_idx is None else np.atleast_1d(env_idx)
        if self.is_start:
            reset_state_ids = self.reset_state_ids if self.use_fixed_reset_state_ids else None
            self._is_start = False
        if reset_state_ids is None:
            reset_state_ids = self._rng.integers(
                0, int(self.cfg.get("num_init_states", 12)), size=len(env_idx)
            )
        self._set_tasks(np.asarray(reset_state_ids)[: len(env_idx)], env_idx)
        self.progress[env_idx] = 0
        self._elapsed_steps[env_idx] = 0
        self.prev_step_reward[env_idx] = 0.0
        self.success_once[env_idx] = False
        self.returns[env_idx] = 0.0
        self.reset_calls.append([int(i) for i in env_idx])
        return self._obs(), {}

    def step(self, actions: Any = None, auto_reset: bool = True):
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions, dtype=np.float64)
        per = float(self.cfg.get("progress_per_action", 10))
        self._elapsed_steps += 1
        delta = np.rint(actions[:, 0] * per).astype(np.int64)
        self.progress = np.clip(self.progress + delta, 0, 100)
        terminations = self.progress >= int(self.cfg.get("success_at", 100))
        truncations = self._elapsed_steps >= int(self.cfg.max_episode_steps)
        obs = self._obs()
        step_reward = self._step_reward(terminations)
        infos: dict[str, Any] = {"episode": self._episode_info(step_reward, terminations)}
        if self.ignore_terminations:
            infos["episode"]["success_at_end"] = torch.from_numpy(terminations.copy())
            terminations = np.zeros_like(terminations)
        dones = terminations | truncations
        if dones.any() and auto_reset and self.auto_reset:
            obs, infos, _ = self._handle_auto_reset(dones, obs, infos)
        return (
            obs,
            torch.from_numpy(step_reward.astype(np.float32)),
            torch.from_numpy(terminations.copy()),
            torch.from_numpy(truncations.copy()),
            infos,
        )

    def chunk_step(self, chunk_actions: Any):
        chunk = chunk_actions.shape[1]
        obs_list, infos_list, rewards, terms, truncs = [], [], [], [], []
        for k in range(chunk):
            obs, r, te, tr, infos = self.step(chunk_actions[:, k], auto_reset=False)
            obs_list.append(obs)
            infos_list.append(infos)
            rewards.append(r)
            terms.append(te)
            truncs.append(tr)
        rewards_t = torch.stack(rewards, dim=1)
        raw_terms = torch.stack(terms, dim=1)
        raw_truncs = torch.stack(truncs, dim=1)
        any_term = raw_terms.any(dim=1)
        any_trunc = raw_truncs.any(dim=1)
        any_done = any_term | any_trunc
        if any_done.any() and self.auto_reset:
            obs_list[-1], infos_list[-1], _ = self._handle_auto_reset(
                any_done.numpy(), obs_list[-1], infos_list[-1]
            )
        if self.auto_reset or self.ignore_terminations:
            out_terms = torch.zeros_like(raw_terms)
            out_terms[:, -1] = any_term
            out_truncs = torch.zeros_like(raw_truncs)
            out_truncs[:, -1] = any_trunc
        else:
            out_terms, out_truncs = raw_terms.clone(), raw_truncs.clone()
        return obs_list, rewards_t, out_terms, out_truncs, infos_list

    def _handle_auto_reset(self, dones: np.ndarray, final_obs: Any, infos: Any):
        final_obs = copy.deepcopy(final_obs)
        final_info = copy.deepcopy(infos)
        env_idx = np.arange(self.num_envs)[np.asarray(dones, dtype=bool)]
        if self.use_fixed_reset_state_ids:
            self.update_reset_state_ids()
            obs, new_infos = self.reset(env_idx, self.reset_state_ids[env_idx])
        else:
            obs, new_infos = self.reset(env_idx, None)
        new_infos["final_observation"] = final_obs
        new_infos["final_info"] = final_info
        new_infos["_final_info"] = np.asarray(dones, dtype=bool)
        new_infos["_final_observation"] = np.asarray(dones, dtype=bool)
        new_infos["_elapsed_steps"] = np.asarray(dones, dtype=bool)
        return obs, new_infos, None

    def close(self) -> None:
        pass
