"""Progress rewards for RLinf's vectorised envs (LIBERO and others of the same shape).

:class:`RLinfProgressReward` feeds the frames of RLinf's ``chunk_step`` to one tracker per
sub-env and returns ``env_reward_weight * env + reward_weight * model`` rewards with the model's
done in ``terminations`` (docs/rlinf.md). Two sub-envs whose frames get 64 grey levels brighter
each step, against a mock service reading grey level ``g`` as progress ``100 g/255``:

>>> import torch
>>> from evolve_envs.reward.clients.progress_client import ProgressClient
>>> from evolve_envs.reward.service.hosting.embedded import EmbeddedService
>>> from evolve_envs.progress.tracker_config import TrackerConfig
>>> class Brighter:  # the shape of RLinf's LiberoEnv, without a simulator
...     num_envs, auto_reset, ignore_terminations, t = 2, False, False, 0
...     def reset(self, env_idx=None, reset_state_ids=None):
...         return self._obs(0), {}
...     def chunk_step(self, actions):
...         obs_list = [self._obs(1) for _ in range(actions.shape[1])]
...         zeros = torch.zeros((2, actions.shape[1]))
...         return obs_list, zeros, zeros.bool(), zeros.bool(), [{} for _ in obs_list]
...     def _obs(self, steps):
...         self.t += steps
...         frames = torch.full((2, 32, 32, 3), min(64 * self.t, 255), dtype=torch.uint8)
...         return {"main_images": frames, "task_descriptions": ["light up"] * 2}
>>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
>>> client = ProgressClient(svc.url)
>>> settings = TrackerConfig(start_step=2, call_every=2, milestone_every=2)
>>> env = RLinfProgressReward(Brighter(), lambda i: ProgressTracker(client, settings))
>>> obs, infos = env.reset()
>>> obs_list, rewards, terms, truncs, infos_list = env.chunk_step(torch.zeros((2, 4, 7)))
>>> rewards[0].tolist(), infos_list[-1]["progress"].tolist()  # 50 at step 2, 100 at 4
([0.0, 0.5, 0.0, 0.5], [100.0, 100.0])
>>> terms[:, -1].tolist()  # done: progress >= 95
[True, True]
>>> env.close(); client.close(); svc.stop()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict

import numpy as np

from evolve_envs.integrations.rlinf.env_state import (
    SubEnvEpisodes,
    annotate,
    frame_getter,
    task_of,
    write_episode_block,
)
from evolve_envs.integrations.rlinf.forwarding import ForwardsToEnv, RLinfEnv
from evolve_envs.integrations.rlinf.frames import resolve as resolve_orientation
from evolve_envs.integrations.rlinf.late_rewards import (
    LateReward,
    LateRewardBook,
    check_late_rewards_exact,
    settle_trackers,
)
from evolve_envs.integrations.rlinf.resets import (
    check_resets_sub_envs,
    env_success_flags,
    final_mask,
    reset_ended,
    reset_indices,
)
from evolve_envs.integrations.rlinf.stack import build_progress_stack, enabled_block
from evolve_envs.progress.hacking import HackingDetector
from evolve_envs.progress.reward_step import RewardStep, RewardTerms
from evolve_envs.progress.tracker import ProgressTracker, TrackerStep
from evolve_envs.training.common.arrays import like, to_numpy, torch_of

__all__ = ["RLinfProgressReward", "wrap_env_from_config"]

logger = logging.getLogger(__name__)

TrackerFactory = Callable[[int], ProgressTracker]
Batch = object  #: a torch tensor or numpy array, ``[N]`` or ``[N, C]``


class _Observed(TypedDict):
    step: int
    frame: Callable[[], np.ndarray]
    env_terminated: bool
    env_truncated: bool
    env_success: bool | None


class RLinfProgressReward(ForwardsToEnv):
    """Progress rewards and the model's done for an RLinf vectorised env (module docstring).

    ``trackers``: one per sub-env, or a factory ``i -> tracker``. ``max_workers``: threads that
    step sync trackers in parallel (default ``min(num_envs, 64)``). ``model_terminates=False``
    only reports the model's done (``infos["done_by_progress"]``). ``on_close``: run by
    :meth:`close`. ``alarm``: fed every finished episode. Usually built by :meth:`from_config`."""

    def __init__(
        self,
        env: RLinfEnv,
        trackers: Sequence[ProgressTracker] | TrackerFactory,
        *,
        reward_weight: float = 1.0,
        env_reward_weight: float = 0.0,
        image_key: str = "main_images",
        task_key: str = "task_descriptions",
        max_workers: int | None = None,
        model_terminates: bool = True,
        on_close: Sequence[Callable[[], object]] = (),
        alarm: HackingDetector | None = None,
        success_bonus: float = 0.0,
        success_threshold: float = 0.95,
        frame_orientation: str = "auto",
    ) -> None:
        self.env = env
        self.frame_orientation = resolve_orientation(frame_orientation, env)
        terms = RewardTerms(
            float(reward_weight),
            float(env_reward_weight),
            float(success_bonus),
            float(success_threshold),
        )
        #: the one reward step: the formula, the success bonus and the alarm
        self.reward_step = RewardStep(terms, alarm)
        self.alarm = alarm
        self.model_terminates = bool(model_terminates)
        num_envs = getattr(env, "num_envs", None)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise TypeError(f"env must expose a positive int num_envs, got {num_envs!r}")
        self._n = int(num_envs)
        if callable(trackers) and not isinstance(trackers, Sequence):
            trackers = [trackers(i) for i in range(self._n)]
        if len(trackers) != self._n:
            raise ValueError(f"need one tracker per sub-env: {len(trackers)} for {self._n} envs")
        self.trackers: list[ProgressTracker] = list(trackers)
        self.image_key = image_key
        self.task_key = task_key
        self.episodes = SubEnvEpisodes(self.trackers, self.reward_step)
        workers = max_workers if max_workers is not None else min(self._n, 64)
        sync = any(t.settings.calls == "sync" for t in self.trackers)
        self._pool = (
            ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="progress")
            if sync and self._n > 1
            else None
        )
        self._on_close = list(on_close)
        self._closed = False
        model_ends = (
            self.model_terminates
            and any(t.settings.terminate_on_done for t in self.trackers)
            and not self.ignore_terminations
        )
        #: ``calls: deferred``: where each step was played, until its episode is settled
        self.late: LateRewardBook | None = None
        self.chunks = 0  # chunk steps so far (a late reward names the one it was played in)
        if all(t.settings.calls == "deferred" for t in self.trackers):
            check_late_rewards_exact(
                auto_reset=self.auto_reset,
                model_ends=model_ends,
                is_eval=bool(getattr(env, "is_eval", False)),
            )
            # settled rewards by the same reward step: formula, bonus, and the alarm fed each
            # settled episode (under deferred an episode's end carries no model summary)
            self.late = LateRewardBook(self._n, self.reward_step, model_ends=model_ends)
        elif self.auto_reset and model_ends:
            check_resets_sub_envs(env)

    @classmethod
    def from_config(
        cls, env: RLinfEnv, reward_model: object, *, environ: Mapping[str, str] | None = None
    ) -> RLinfProgressReward:
        """Wrap ``env`` as a ``reward_model`` block (mapping, OmegaConf node, YAML path) says."""
        stack = build_progress_stack(reward_model, int(env.num_envs), environ=environ)
        return cls(
            env,
            stack.trackers,
            reward_weight=stack.reward_weight,
            env_reward_weight=stack.env_reward_weight,
            model_terminates=not stack.config.ignore_terminations,
            on_close=stack.on_close,
            alarm=stack.alarm,
            success_bonus=stack.config.success_bonus,
            success_threshold=stack.config.success_bonus_threshold,
        )

    @property
    def num_envs(self) -> int:
        return self._n

    @property
    def reward_weight(self) -> float:
        return self.reward_step.terms.reward_weight

    @property
    def env_reward_weight(self) -> float:
        return self.reward_step.terms.env_reward_weight

    def reset(self, *args: object, **kwargs: object) -> tuple[Mapping[str, object], dict]:
        """Reset (all or ``env_idx`` sub-envs) and start their trackers on the reset frames."""
        obs, infos = self.env.reset(*args, **kwargs)
        env_idx = kwargs.get("env_idx", args[0] if args else None)
        self._start_episodes(obs, reset_indices(env_idx, self._n))
        return obs, infos

    def step(self, actions: Batch = None, auto_reset: bool = True):
        """One step of every sub-env (RLinf's ``step``): rewards/terminations shaped ``[N]``."""
        obs, rewards, terms, truncs, infos = self.env.step(actions, auto_reset=auto_reset)
        obs_l, rew, term, trunc, infos_l = self._process(
            [obs],
            rewards.reshape(-1, 1),
            terms.reshape(-1, 1),
            truncs.reshape(-1, 1),
            [infos],
            resets_done=bool(auto_reset) and self.auto_reset,
        )
        return obs_l[0], rew[:, 0], term[:, 0], trunc[:, 0], infos_l[0]

    def chunk_step(self, chunk_actions: Batch):
        """``C`` steps of every sub-env, as RLinf's ``chunk_step``."""
        obs_list, rewards, terms, truncs, infos_list = self.env.chunk_step(chunk_actions)
        return self._process(
            list(obs_list), rewards, terms, truncs, list(infos_list), resets_done=self.auto_reset
        )

    def late_rewards(self) -> list[LateReward]:
        """``calls: deferred``: the rewards settled since the last call."""
        return [] if self.late is None else settle_trackers(self.trackers, self.late)

    def close(self) -> None:
        """Close the wrapped env, the tracker threads and what :meth:`from_config` opened."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            close = getattr(self.env, "close", None)
            if callable(close):
                close()
        finally:
            for fn in self._on_close:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - closing must not mask the caller's error
                    logger.warning("closing reward model resources failed", exc_info=True)

    def __enter__(self) -> RLinfProgressReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_episodes(self, obs: Mapping[str, object], idx: list[int]) -> None:
        images = obs[self.image_key]
        fallback_tasks = getattr(self.env, "task_descriptions", None)
        for i in idx:
            task = task_of(obs, self.task_key, i, fallback_tasks)
            if self.late is not None and not self.trackers[i].episode_over:
                self.late.drop(i)  # the open episode is abandoned: its record never comes
            self.episodes.start(i, task, frame_getter(images, i, self.frame_orientation)())
            if self.late is not None:
                self.late.start(i, self.trackers[i].episodes)

    def _observe_all(self, calls: list[tuple[int, _Observed]]) -> dict[int, TrackerStep]:
        def run(item: tuple[int, _Observed]) -> tuple[int, TrackerStep]:
            i, kw = item
            return i, self.trackers[i].observe(**kw)

        if len(calls) <= 1 or self._pool is None:
            return dict(map(run, calls))
        return dict(self._pool.map(run, calls))

    def _process(
        self,
        obs_list: list[Mapping[str, object]],
        rewards: Batch,
        terms: Batch,
        truncs: Batch,
        infos_list: list[dict[str, object]],
        *,
        resets_done: bool,
    ):
        n, c = self._n, len(obs_list)
        env_rewards = rewards
        self.chunks += 1
        term_np = to_numpy(terms, bool)
        trunc_np = to_numpy(truncs, bool)
        if term_np.shape != (n, c) or trunc_np.shape != (n, c):
            raise ValueError(
                f"expected terminations/truncations of shape {(n, c)}, got "
                f"{term_np.shape} / {trunc_np.shape}"
            )
        ignore_terms = self.ignore_terminations or not self.model_terminates
        last_infos = infos_list[-1] if isinstance(infos_list[-1], Mapping) else {}
        final_obs = last_infos.get("final_observation") if resets_done else None
        env_success = env_success_flags(infos_list, n)
        env_r = to_numpy(env_rewards, np.float64)

        model_r = np.zeros((n, c), dtype=np.float64)
        bonus_r = np.zeros((n, c), dtype=np.float64)  # the success bonus, on an episode's end
        progress = np.zeros((n, c), dtype=np.float32)
        done_flag = np.zeros((n, c), dtype=bool)
        model_term = np.zeros((n, c), dtype=bool)
        snapshots: list[dict[str, np.ndarray]] = []  # episode statistics after each step

        for t in range(c):
            images = obs_list[t][self.image_key]
            if t == c - 1 and final_obs is not None:
                mask = final_mask(last_infos, n)
                final_images = final_obs[self.image_key]
            else:
                mask, final_images = None, None
            calls: list[tuple[int, _Observed]] = []
            for i in range(n):
                if self.trackers[i].episode_over:
                    continue
                src = final_images if mask is not None and mask[i] else images
                self.episodes.steps[i] += 1
                success = None if env_success[t] is None else bool(env_success[t][i])
                observed = _Observed(
                    step=int(self.episodes.steps[i]),
                    frame=frame_getter(src, i, self.frame_orientation),
                    env_terminated=bool(term_np[i, t]),
                    env_truncated=bool(trunc_np[i, t]),
                    env_success=success,
                )
                calls.append((i, observed))
            for i, out in self._observe_all(calls).items():
                model_r[i, t] = out.reward
                if self.late is not None:  # settled later; a model done is written then
                    self.late.played(i, chunk=self.chunks - 1, action=t, env_reward=env_r[i, t])
                if out.summary is not None:
                    bonus_r[i, t] = self.episodes.record_end(i, out.summary).bonus or 0.0
                paid = self.reward_step.terms.mix(env_r[i, t], out.reward, bonus_r[i, t])
                self.episodes.returns[i] += paid
                if out.terminate and not ignore_terms and self.late is None:
                    model_term[i, t] = True
            snapshots.append(self.episodes.stats_arrays())
            progress[:, t] = snapshots[-1]["progress"]
            done_flag[:, t] = snapshots[-1]["done_by_progress"]

        # Terminations: the env's, OR the model's. With auto-reset / ignore_terminations RLinf
        # reports an end on the chunk's last action only; do the same.
        out_terms = term_np.copy()
        if resets_done or self.ignore_terminations:
            out_terms[:, -1] |= model_term.any(axis=1)
        else:
            out_terms |= model_term

        env_done_at_end = term_np[:, -1] | trunc_np[:, -1]
        if resets_done:
            need_reset = model_term.any(axis=1) & ~env_done_at_end
            if need_reset.any():
                obs_list[-1], infos_list[-1] = reset_ended(
                    self.env, need_reset, obs_list[-1], infos_list[-1]
                )
            restart = [i for i in range(n) if env_done_at_end[i] or need_reset[i]]
            if restart:
                final_info = infos_list[-1].get("final_info")
                if isinstance(final_info, dict) and isinstance(final_info.get("episode"), dict):
                    write_episode_block(final_info["episode"], snapshots[-1])
                self._start_episodes(obs_list[-1], restart)

        annotate(infos_list, env_r, model_r, progress, done_flag, snapshots)

        mixed = self.reward_step.terms.mix(env_r, model_r, bonus_r)
        rewards_t, terms_t = torch_of(env_rewards), torch_of(terms)
        rewards_out = like(mixed, env_rewards, rewards_t) if rewards_t else mixed.astype(np.float32)
        terms_out = like(out_terms, terms, terms_t, is_bool=True)
        return obs_list, rewards_out, terms_out, truncs, infos_list


def wrap_env_from_config(env: RLinfEnv, env_cfg: object) -> RLinfEnv:
    """``env`` wrapped per ``env_cfg.reward_model`` (RLinf's ``env.train`` node), or as is."""
    block = enabled_block(env_cfg)
    return env if block is None else RLinfProgressReward.from_config(env, block)
