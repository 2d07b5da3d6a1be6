"""A time limit whose max episode steps grow in stages during training.

>>> import gymnasium as gym
>>> env = ProgressiveHorizon(
...     gym.make("CartPole-v1"), [{"max_steps": 3}, {"max_steps": 6, "after_episodes": 1}]
... )
>>> _, info = env.reset(seed=0)
>>> info["max_episode_steps"], info["horizon_stage"]
(3, 0)
>>> [env.step(0)[3] for _ in range(3)]   # truncated at the stage's limit
[False, False, True]
>>> env.reset(seed=1)[1]["max_episode_steps"]   # one episode finished: the next stage
6
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, SupportsFloat

import gymnasium as gym
from gymnasium.core import ActType, ObsType

__all__ = ["HorizonStage", "ProgressiveHorizon", "parse_stages"]

StageRule = Literal["episodes", "success_rate"]


@dataclass(frozen=True)
class HorizonStage:
    """One stage: ``max_steps`` per episode, entered after ``after_episodes`` finished episodes
    (``by="episodes"``) or at ``min_success_rate`` over the last window (``by="success_rate"``).

    >>> parse_stages([HorizonStage(256), {"max_steps": 384, "after_episodes": 100}])[1]
    HorizonStage(max_steps=384, after_episodes=100, min_success_rate=0.0)
    """

    max_steps: int
    after_episodes: int = 0
    min_success_rate: float = 0.0


def parse_stages(stages: Sequence[Mapping[str, object] | HorizonStage]) -> list[HorizonStage]:
    """Validate a stage list (mappings or :class:`HorizonStage`) and return stages."""
    if not stages:
        raise ValueError("progressive horizon needs at least one stage")
    out: list[HorizonStage] = []
    for i, raw in enumerate(stages):
        if isinstance(raw, HorizonStage):
            stage = raw
        elif isinstance(raw, Mapping):
            unknown = set(raw) - {"max_steps", "after_episodes", "min_success_rate"}
            if unknown:
                raise ValueError(f"stages[{i}]: unknown keys {sorted(unknown)}")
            if "max_steps" not in raw:
                raise ValueError(f"stages[{i}]: max_steps is required")
            stage = HorizonStage(
                max_steps=int(raw["max_steps"]),
                after_episodes=int(raw.get("after_episodes", 0)),
                min_success_rate=float(raw.get("min_success_rate", 0.0)),
            )
        else:
            raise ValueError(f"stages[{i}]: expected a mapping, got {type(raw).__name__}")
        if stage.max_steps < 1:
            raise ValueError(f"stages[{i}].max_steps must be >= 1, got {stage.max_steps}")
        if not 0.0 <= stage.min_success_rate <= 1.0:
            raise ValueError(
                f"stages[{i}].min_success_rate must be in [0, 1], got {stage.min_success_rate}"
            )
        if out and stage.max_steps <= out[-1].max_steps:
            raise ValueError(
                f"stages[{i}].max_steps must grow: {stage.max_steps} after {out[-1].max_steps}"
            )
        if out and stage.after_episodes < out[-1].after_episodes:
            raise ValueError(f"stages[{i}].after_episodes must not decrease")
        out.append(stage)
    return out


class ProgressiveHorizon(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Truncate episodes at a max-steps value that grows in stages (docs/wrappers.md)."""

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        stages: Sequence[Mapping[str, object] | HorizonStage],
        *,
        by: StageRule = "episodes",
        window: int = 20,
        success_key: str = "is_success",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, stages=stages, by=by, window=window, success_key=success_key
        )
        gym.Wrapper.__init__(self, env)
        if by not in ("episodes", "success_rate"):
            raise ValueError(f"by must be 'episodes' or 'success_rate', got {by!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.stages = parse_stages(stages)
        self.by: StageRule = by
        self.window = int(window)
        self.success_key = success_key
        self.episodes_seen = 0
        self._stage = 0
        self._recent: collections.deque[bool] = collections.deque(maxlen=self.window)
        self._elapsed = 0
        self._episode_open = False
        self._last_success = False

    # ------------------------------------------------------------------ schedule
    @property
    def stage(self) -> int:
        """Index of the current stage."""
        return self._stage

    @property
    def max_episode_steps(self) -> int:
        """The current stage's max episode steps."""
        return self.stages[self._stage].max_steps

    @property
    def elapsed_steps(self) -> int:
        return self._elapsed

    def set_stage(self, stage: int) -> None:
        """Jump to ``stage`` (e.g. when resuming training); applies from the next reset."""
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"stage must be in [0, {len(self.stages)}), got {stage}")
        self._stage = int(stage)
        self._recent.clear()

    def _record_episode(self, success: bool) -> None:
        self.episodes_seen += 1
        self._recent.append(bool(success))
        if self.by == "episodes":
            while (
                self._stage + 1 < len(self.stages)
                and self.episodes_seen >= self.stages[self._stage + 1].after_episodes
            ):
                self._stage += 1
            return
        nxt = self._stage + 1
        if nxt < len(self.stages) and len(self._recent) >= self.window:
            rate = sum(self._recent) / len(self._recent)
            if rate >= self.stages[nxt].min_success_rate:
                self._stage = nxt
                self._recent.clear()

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        if self._episode_open:  # the previous episode was cut short by the caller
            self._record_episode(self._last_success)
        if self.by == "episodes" and self.episodes_seen == 0:
            self._record_stage_zero()
        obs, info = self.env.reset(seed=seed, options=options)
        self._elapsed = 0
        self._episode_open = True
        self._last_success = bool(info.get(self.success_key, False))
        info["max_episode_steps"] = self.max_episode_steps
        info["horizon_stage"] = self._stage
        return obs, info

    def _record_stage_zero(self) -> None:
        while (
            self._stage + 1 < len(self.stages) and self.stages[self._stage + 1].after_episodes <= 0
        ):
            self._stage += 1

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._elapsed >= self.max_episode_steps and not terminated:
            truncated = True
        self._last_success = bool(info.get(self.success_key, False))
        info["max_episode_steps"] = self.max_episode_steps
        info["horizon_stage"] = self._stage
        if terminated or truncated:
            self._episode_open = False
            self._record_episode(self._last_success)
        return obs, reward, terminated, truncated, info
