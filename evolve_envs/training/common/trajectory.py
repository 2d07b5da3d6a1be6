"""One segment of experience collected by one worker with one policy version.

>>> import numpy as np
>>> tr = Trajectory(obs={"state": np.zeros((4, 2), np.float32)},
...     actions=np.zeros((3, 1), np.float32), behaviour_logp=np.zeros(3, np.float32),
...     rewards=np.ones(3, np.float32),
...     dones=np.array([False, False, True]), policy_version=7)
>>> tr.validate(); len(tr), tr.action_dim
(3, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Trajectory", "stack_obs"]


@dataclass
class Trajectory:
    """``T`` steps of one worker under one policy version: policy inputs with one extra row (the
    observation after the last step, for bootstrapping), actions *before* clipping, behaviour
    log-probs, rewards, ``dones[t]`` (terminated after step ``t``; a time limit is no termination),
    and the stats of the episodes that ended in it."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    behaviour_logp: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    policy_version: int
    worker_id: int = 0
    episode_stats: list[dict[str, float | str | bool]] = field(default_factory=list)

    def __len__(self) -> int:
        return int(np.asarray(self.rewards).shape[0])

    @property
    def action_dim(self) -> int:
        """Size ``A`` of one action."""
        return int(np.asarray(self.actions).shape[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays of this segment (observations included)."""
        arrays = [self.actions, self.behaviour_logp, self.rewards, self.dones, *self.obs.values()]
        return int(sum(np.asarray(a).nbytes for a in arrays))

    @property
    def terminated(self) -> bool:
        """True when the segment's last step ended its episode by termination."""
        return bool(len(self) > 0 and np.asarray(self.dones)[-1])

    def validate(self) -> None:
        """Check shapes, dtypes and finiteness; a ``ValueError`` names the offending field."""
        for name in ("actions", "behaviour_logp", "rewards", "dones"):
            if not isinstance(getattr(self, name), np.ndarray):
                raise ValueError(
                    f"Trajectory.{name}: expected a NumPy array, got "
                    f"{type(getattr(self, name)).__name__}"
                )
        if self.rewards.ndim != 1:
            raise ValueError(f"Trajectory.rewards: expected shape [T], got {self.rewards.shape}")
        t = self.rewards.shape[0]
        if t < 1:
            raise ValueError("Trajectory.rewards: a trajectory needs at least one step")
        if self.actions.ndim != 2 or self.actions.shape[0] != t:
            raise ValueError(
                f"Trajectory.actions: expected shape [T={t}, A], got {self.actions.shape}"
            )
        for name in ("behaviour_logp", "dones"):
            arr = getattr(self, name)
            if arr.shape != (t,):
                raise ValueError(f"Trajectory.{name}: expected shape ({t},), got {arr.shape}")
        for name in ("actions", "behaviour_logp", "rewards"):
            arr = getattr(self, name)
            if not np.issubdtype(arr.dtype, np.floating):
                raise ValueError(f"Trajectory.{name}: expected a float dtype, got {arr.dtype}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"Trajectory.{name}: contains non-finite values")
        if self.dones.dtype != np.bool_:
            raise ValueError(f"Trajectory.dones: expected dtype bool, got {self.dones.dtype}")
        if not isinstance(self.obs, dict) or not self.obs:
            raise ValueError("Trajectory.obs: expected a non-empty dict of arrays")
        for key, arr in self.obs.items():
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"Trajectory.obs[{key!r}]: expected a NumPy array")
            if arr.ndim < 1 or arr.shape[0] != t + 1:
                lead = arr.shape[0] if arr.ndim else None
                raise ValueError(
                    f"Trajectory.obs[{key!r}]: leading dimension {lead}, expected T + 1 = {t + 1}"
                )
            if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
                raise ValueError(f"Trajectory.obs[{key!r}]: contains non-finite values")
        if not isinstance(self.policy_version, int | np.integer) or self.policy_version < 0:
            raise ValueError(
                "Trajectory.policy_version: expected a non-negative int, "
                f"got {self.policy_version!r}"
            )

    def step_obs(self) -> dict[str, np.ndarray]:
        """Observations of the ``T`` acting steps (rows ``0 .. T-1``)."""
        return {k: v[:-1] for k, v in self.obs.items()}


def stack_obs(trajs: Sequence[Trajectory], *, include_last: bool = True) -> dict[str, np.ndarray]:
    """The observations of several trajectories along the leading axis: ``T_i + 1`` rows each with
    ``include_last`` (the bootstrap row), else ``T_i``."""
    if not trajs:
        raise ValueError("stack_obs: no trajectories")
    keys = list(trajs[0].obs)
    out: dict[str, np.ndarray] = {}
    for k in keys:
        parts = []
        for tr in trajs:
            if set(tr.obs) != set(keys):
                raise ValueError(f"stack_obs: observation keys differ: {sorted(tr.obs)} vs {keys}")
            parts.append(tr.obs[k] if include_last else tr.obs[k][:-1])
        out[k] = np.concatenate(parts, axis=0)
    return out
