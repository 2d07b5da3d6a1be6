"""RLinf ``EnvWorker`` that installs progress rewards from the ``reward_model`` YAML block.

:class:`ProgressEnvWorker` wraps each env RLinf builds in
:class:`~evolve_envs.integrations.rlinf.adapter.RLinfProgressReward` and writes the late rewards
of ``calls: deferred`` into the stored rollout before it is sent. Needs RLinf::

    env_group = ProgressEnvWorker.create_group(cfg).launch(
        cluster, name=cfg.env.group_name, placement_strategy=env_placement)
"""

from __future__ import annotations

from collections.abc import Callable

from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward
from evolve_envs.integrations.rlinf.forwarding import RLinfEnv
from evolve_envs.integrations.rlinf.late_rewards import write_late_rewards
from evolve_envs.integrations.rlinf.quiet_gym import import_gym_quietly
from evolve_envs.integrations.rlinf.stack import Node, check_reward_switches, enabled_block

import_gym_quietly()  # RLinf's envs import gym: no "unmaintained" banner in every worker

try:
    from rlinf.workers.env.env_worker import EnvWorker as _RLinfEnvWorker
except ImportError as exc:  # pragma: no cover - exercised only without RLinf
    raise ImportError(
        "evolve_envs.integrations.rlinf.worker needs the 'rlinf' package (RLinf), which could "
        f"not be imported: {exc}. Install it with `pip install 'evolve-envs[rlinf]'` or follow "
        "RLinf's installation guide."
    ) from exc

__all__ = ["ProgressEnvWorker", "with_progress_reward"]


def with_progress_reward(
    env_cls: Callable[..., RLinfEnv], env_cfg: Node, where: str = "env.train"
) -> Callable[..., RLinfEnv]:
    """RLinf's ``env_cls``, wrapping what it builds per ``env_cfg.reward_model`` (if enabled)."""
    block = enabled_block(env_cfg, where)
    if block is None:
        return env_cls

    def build(*args: object, **kwargs: object) -> RLinfEnv:
        return RLinfProgressReward.from_config(env_cls(*args, **kwargs), block)

    build.__name__ = f"ProgressReward[{getattr(env_cls, '__name__', 'env')}]"
    return build


def progress_wrapper(env: object) -> RLinfProgressReward | None:
    """The :class:`RLinfProgressReward` in ``env``'s wrapper chain (``None`` without one)."""
    for _ in range(16):
        if isinstance(env, RLinfProgressReward):
            return env
        env = getattr(env, "env", None)
    return None


class ProgressEnvWorker(_RLinfEnvWorker):
    """RLinf's ``EnvWorker`` with progress rewards installed from ``env.*.reward_model``."""

    #: per stage: the stored rollout and, per chunk step of the wrapper, its indices there
    _late_slots: dict[int, tuple[object, dict[int, tuple[int, int]]]]

    def _setup_env_and_wrappers(self, env_cls, env_cfg, num_envs_per_stage: int):  # noqa: ANN001
        check_reward_switches(self.cfg)
        where = "env.eval" if bool(env_cfg.get("is_eval", False)) else "env.train"
        return super()._setup_env_and_wrappers(
            env_cls=with_progress_reward(env_cls, env_cfg, where),
            env_cfg=env_cfg,
            num_envs_per_stage=num_envs_per_stage,
        )

    def env_interact_step(self, chunk_actions, stage_id: int):  # noqa: ANN001, ANN201
        """RLinf's step, noting where its rewards and dones will be stored (``deferred``)."""
        out = super().env_interact_step(chunk_actions, stage_id)
        wrapper = progress_wrapper(self.env_list[stage_id])
        if wrapper is not None and wrapper.late is not None:
            result = self.rollout_results[stage_id]
            slots = self.__dict__.setdefault("_late_slots", {})
            if stage_id not in slots or slots[stage_id][0] is not result:
                slots[stage_id] = (result, {})  # a new rollout
            # RLinf appends this step's result next: at the current lengths
            where = (len(result.rewards), len(result.terminations))
            slots[stage_id][1][wrapper.chunks - 1] = where
        return out

    def write_late_rewards(self) -> int:
        """Write every settled reward into the stored rollout; returns the count of entries."""
        count = 0
        slots = self.__dict__.get("_late_slots", {})
        for stage_id, env in enumerate(self.env_list):
            wrapper = progress_wrapper(env)
            if wrapper is None or wrapper.late is None:
                continue
            late = wrapper.late_rewards()
            results = getattr(self, "rollout_results", None)
            result = results[stage_id] if results else None
            known = slots.get(stage_id, (None, {}))
            count += write_late_rewards(
                result.rewards if result is not None else [],
                result.dones if result is not None else [],
                known[1] if known[0] is result else {},
                late,
                terminations=result.terminations if result is not None else [],
            )
        return count

    def finish_rollout(self, mode: str = "train") -> None:
        if mode == "train":  # an evaluation env takes no deferred calls (refused at build)
            self.write_late_rewards()
        super().finish_rollout(mode)

    async def send_rollout_trajectories_pipeline(self, rollout_results, channel) -> None:  # noqa: ANN001
        self.write_late_rewards()
        await super().send_rollout_trajectories_pipeline(rollout_results, channel)

    def check_chunk(self, chunk: int, action_dim: int) -> list[dict[str, list[float]]]:
        """Start-up check: each train env reset and stepped through one chunk of zero actions."""
        import torch

        results = []
        for env in self.env_list:
            env.is_start = True
            obs, _ = env.reset()
            num_envs = len(obs["task_descriptions"])
            actions = torch.zeros((num_envs, chunk, action_dim))
            _, rewards, _, _, infos_list = env.chunk_step(actions)
            wrapper = progress_wrapper(env)
            if wrapper is not None:
                wrapper.late_rewards()  # this chunk is no part of any rollout
            last = infos_list[-1]
            episode = last.get("episode", {})
            results.append(
                {
                    "progress": [float(x) for x in last.get("progress", [])],
                    "reward_model_calls": [int(x) for x in episode.get("reward_model_calls", [])],
                    "rewards": [float(x) for x in rewards.sum(dim=1)],
                }
            )
        return results

    def env_stacks(self) -> list[list[str]]:
        """Class names of each train env's wrapper chain, outermost first (for start-up checks)."""
        stacks = []
        for env in self.env_list:
            names = []
            while env is not None and len(names) < 16:
                names.append(type(env).__name__)
                env = getattr(env, "env", None)
            stacks.append(names)
        return stacks
