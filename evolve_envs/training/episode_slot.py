"""One env's running episode in a rollout worker, and the numbers of an episode that ended.

:class:`EnvSlot` holds the unpushed part of an env's episode as the worker steps it (policy
inputs, actions, behaviour log-probs, rewards, dones, policy versions) and makes a validated
:class:`~evolve_envs.training.common.trajectory.Trajectory` of it (:meth:`EnvSlot.trajectory`).
:func:`episode_stats` is the one place where an ended episode becomes the learner's metrics
(return, length, env success, the model's final progress, fallbacks, model termination, the
alarm): the worker's immediate path (``calls: sync | async``) and its settled path
(``calls: deferred``, :mod:`evolve_envs.training.settling`) both go through it.

Example:
    >>> import numpy as np
    >>> slot = EnvSlot()
    >>> slot.add({"s": np.zeros(2, np.float32)}, np.zeros(1, np.float32), -0.5, 0.25, True, 3)
    >>> traj = slot.trajectory({"s": np.ones(2, np.float32)}, worker_id=1)
    >>> len(traj), traj.terminated, traj.policy_version, traj.obs["s"].shape
    (1, True, 3, (2, 2))
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from evolve_envs.progress.episode_summary import model_done
from evolve_envs.training.common.trajectory import Trajectory

__all__ = ["EnvSlot", "episode_stats"]


def episode_stats(
    *,
    episode_return: float,
    length: int,
    info: Mapping[str, object],
    terminated: bool,
    fallbacks: int,
    summary: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """One finished episode's numbers for the learner's metrics: return, length, env success
    (``info["is_success"]``), final model progress, whether it terminated, fallbacks and, where
    the stack reports them, whether the model ended the episode (and whether the env had
    succeeded then) and the hacking alarm. ``summary`` is the episode's reward-model summary
    (``info["episode_reward_model"]`` when None).

    Example:
        >>> episode_stats(episode_return=0.5, length=3, info={"is_success": True, "progress": 90},
        ...               terminated=True, fallbacks=0)["success"]
        1.0
    """
    summary = info.get("episode_reward_model") if summary is None else summary
    progress = info.get("progress")
    if progress is None and isinstance(summary, Mapping):
        progress = summary.get("progress")
    stats: dict[str, object] = {
        "return": float(episode_return),
        "length": int(length),
        "success": float(bool(info.get("is_success", False))),
        "progress": float(progress) if progress is not None else float("nan"),
        "terminated": float(terminated),
        "fallbacks": int(fallbacks),
    }
    if fallbacks and isinstance(summary, Mapping) and summary.get("last_error"):
        stats["fallback_reason"] = str(summary["last_error"])
    if isinstance(summary, Mapping) and "model_terminated" in summary:
        stats.update({k: float(v) for k, v in model_done(summary).items()})
    alarm = info.get("reward_alarm")
    if isinstance(alarm, Mapping):
        stats["alarm_firing"] = float(bool(alarm.get("firing", False)))
    return stats


class EnvSlot:
    """One env's running episode and the unpushed part of it (see the module docstring)."""

    def __init__(self) -> None:
        self.inputs: list[dict[str, np.ndarray]] = []
        self.actions: list[np.ndarray] = []
        self.logp: list[float] = []
        self.rewards: list[float] = []
        self.dones: list[bool] = []
        self.versions: list[int] = []
        self.episode_stats: list[dict[str, object]] = []
        self.ep_return = 0.0
        self.ep_len = 0
        self.ep_fallbacks = 0

    def add(
        self,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        reward: float,
        terminated: bool,
        version: int,
        fallback: bool = False,
    ) -> None:
        """Append one step."""
        self.inputs.append(dict(inputs))
        self.actions.append(action)
        self.logp.append(float(logp))
        self.rewards.append(float(reward))
        self.dones.append(bool(terminated))
        self.versions.append(int(version))
        self.ep_return += float(reward)
        self.ep_len += 1
        self.ep_fallbacks += int(bool(fallback))

    def end_episode(self, info: Mapping[str, object], terminated: bool) -> None:
        """The episode ended on the last step added: keep its stats, start counting anew."""
        self.episode_stats.append(
            episode_stats(
                episode_return=self.ep_return,
                length=self.ep_len,
                info=info,
                terminated=terminated,
                fallbacks=self.ep_fallbacks,
            )
        )
        self.ep_return, self.ep_len, self.ep_fallbacks = 0.0, 0, 0

    def trajectory(self, last_inputs: Mapping[str, np.ndarray], worker_id: int) -> Trajectory:
        """The unpushed steps as a validated trajectory; ``last_inputs`` is the observation
        after the last step (the bootstrap row). The slot's segment is then emptied."""
        steps = [*self.inputs, dict(last_inputs)]
        traj = Trajectory(
            obs={k: np.stack([s[k] for s in steps]) for k in steps[0]},
            actions=np.stack(self.actions).astype(np.float32),
            behaviour_logp=np.asarray(self.logp, dtype=np.float32),
            rewards=np.asarray(self.rewards, dtype=np.float32),
            dones=np.asarray(self.dones, dtype=bool),
            policy_version=int(min(self.versions)),
            worker_id=worker_id,
            episode_stats=list(self.episode_stats),
        )
        traj.validate()
        self.inputs, self.actions, self.logp = [], [], []
        self.rewards, self.dones, self.versions = [], [], []
        self.episode_stats = []
        return traj
