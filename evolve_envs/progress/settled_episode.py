"""SettledEpisode: one episode as a trainer learns from it under ``calls: deferred``.

>>> import numpy as np
>>> ep = SettledEpisode(index=1, task="open the drawer", steps_played=5, length=3,
...                     rewards=np.array([0.0, 0.5, 0.5]), model_rewards=np.array([0.0, 0.5, 0.5]),
...                     progress=np.array([0.0, 50.0, 100.0]), terminated=True, truncated=False,
...                     summary={"progress": 100.0})
>>> ep.cut_steps, float(ep.rewards.sum()), ep.final
(2, 1.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SettledEpisode"]


@dataclass(frozen=True)
class SettledEpisode:
    """One settled episode (docs/PROGRESS.md). Step ``t`` (1 = after the first action)
    is at index ``t - 1`` of every array."""

    index: int
    task: str
    steps_played: int
    length: int
    rewards: np.ndarray
    model_rewards: np.ndarray
    progress: np.ndarray
    terminated: bool
    truncated: bool
    summary: dict[str, object] = field(default_factory=dict)
    final: bool = True
    alarm: dict[str, object] | None = None

    @property
    def cut_steps(self) -> int:
        """Steps played after a model done (not part of the episode)."""
        return self.steps_played - self.length

    @property
    def total_reward(self) -> float:
        return float(self.rewards.sum())
