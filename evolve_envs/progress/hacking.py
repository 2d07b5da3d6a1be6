"""The reward-hacking detector: model progress against env success over finished episodes, per task.

>>> import warnings
>>> d = HackingDetector(window=2, baseline=2)
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     states = [d.add("stack the blocks", p, success=False) for p in (0.2, 0.3, 0.9, 0.95)]
>>> states[-1]["firing"], round(states[-1]["progress_rise"], 3), len(caught)
(True, 0.675, 1)
"""

from __future__ import annotations

import collections
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Literal

__all__ = ["HackingDetectorConfig", "HackingDetector", "RewardHackingWarning"]


class RewardHackingWarning(UserWarning):
    """The reward model's scores drift away from the env's success (docs/PROGRESS.md)."""


@dataclass(frozen=True)
class HackingDetectorConfig:
    """Thresholds of the alarm (fractions of full progress / rates in [0, 1]).

    >>> HackingDetectorConfig(window=50, baseline=50, score="max").window
    50
    """

    window: int = 20
    baseline: int = 20
    score: Literal["final", "max"] = "final"
    min_progress_rise: float = 0.15
    max_success_rise: float = 0.05
    high_progress: float = 0.9
    min_high_failure_rise: float = 0.2

    def __post_init__(self) -> None:
        for name in ("window", "baseline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(f"alarm.{name}: expected an int >= 2, got {value!r}")
        if self.score not in ("final", "max"):
            raise ValueError(f"alarm.score: expected 'final' or 'max', got {self.score!r}")
        for name in ("min_progress_rise", "high_progress", "min_high_failure_rise"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"alarm.{name}: must be in (0, 1], got {getattr(self, name)!r}")
        if not 0.0 <= self.max_success_rise <= 1.0:
            raise ValueError(
                f"alarm.max_success_rise: must be in [0, 1], got {self.max_success_rise!r}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> HackingDetectorConfig:
        """Settings from a mapping (e.g. the ``reward_model.alarm`` block); ``enable`` and other
        keys that are not settings are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass
class _Task:
    history: collections.deque[tuple[float, bool]]
    episodes: int = 0
    armed: bool = True
    triggers: int = 0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class HackingDetector:
    """Rolling per-task detector of reward hacking (docs/PROGRESS.md). Thread-safe:
    the sub-envs of a vectorised env may share one.

        >>> d = HackingDetector(window=2, baseline=2)
        >>> d.add("open the drawer", 0.4, success=True)["ready"]
        False
    """

    def __init__(
        self,
        settings: HackingDetectorConfig | Mapping[str, object] | None = None,
        **overrides: object,
    ) -> None:
        if settings is None:
            settings = HackingDetectorConfig()
        elif isinstance(settings, Mapping):
            settings = HackingDetectorConfig.from_mapping(settings)
        self.settings: HackingDetectorConfig = (
            replace(settings, **overrides) if overrides else settings
        )
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}

    @property
    def tasks(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def add(self, task: str, score: float, success: bool) -> dict[str, object]:
        """Account one finished episode of ``task``: the model's ``score`` (fraction of full
        progress) and the env's ``success``. Returns the task's state (docs/PROGRESS.md); warns
        when the alarm goes off."""
        s = self.settings
        with self._lock:
            state = self._tasks.get(task)
            if state is None:
                state = _Task(collections.deque(maxlen=s.window + s.baseline))
                self._tasks[task] = state
            state.history.append((min(1.0, max(0.0, float(score))), bool(success)))
            state.episodes += 1
            out = self._evaluate(task, state)
            fire = out["firing"] and state.armed
            if fire:
                state.triggers += 1
                state.armed = False
            elif not out["firing"]:
                state.armed = True
            out["triggers"] = state.triggers
        if fire:
            warnings.warn(self._message(out), RewardHackingWarning, stacklevel=2)
        return out

    def state(self, task: str) -> dict[str, object]:
        """The task's current state without adding an episode."""
        with self._lock:
            state = self._tasks.get(task) or _Task(collections.deque())
            out = self._evaluate(task, state)
            out["triggers"] = state.triggers
            return out

    def _evaluate(self, task: str, state: _Task) -> dict[str, object]:
        s = self.settings
        out: dict[str, object] = {
            "task": task,
            "episodes": state.episodes,
            "ready": len(state.history) == s.window + s.baseline,
        }
        keys = ("progress", "success", "high_failure")
        for key in keys:
            out.update({f"{key}_recent": None, f"{key}_baseline": None, f"{key}_rise": None})
        out.update(progress_without_success=False, high_progress_failures=False, firing=False)
        if not out["ready"]:
            return out
        items = list(state.history)
        parts = {"baseline": items[: s.baseline], "recent": items[s.baseline :]}
        for name, part in parts.items():
            out[f"progress_{name}"] = _mean([score for score, _ in part])
            out[f"success_{name}"] = _mean([float(ok) for _, ok in part])
            out[f"high_failure_{name}"] = _mean(
                [float(score >= s.high_progress and not ok) for score, ok in part]
            )
        for key in keys:
            out[f"{key}_rise"] = out[f"{key}_recent"] - out[f"{key}_baseline"]
        out["progress_without_success"] = bool(
            out["progress_rise"] >= s.min_progress_rise
            and out["success_rise"] <= s.max_success_rise
        )
        out["high_progress_failures"] = bool(out["high_failure_rise"] >= s.min_high_failure_rise)
        out["firing"] = out["progress_without_success"] or out["high_progress_failures"]
        return out

    def _message(self, out: Mapping[str, object]) -> str:
        s = self.settings
        reasons = []
        if out["progress_without_success"]:
            reasons.append(
                f"mean model {s.score} progress rose {out['progress_baseline']:.2f} -> "
                f"{out['progress_recent']:.2f} while env success went "
                f"{out['success_baseline']:.2f} -> {out['success_recent']:.2f}"
            )
        if out["high_progress_failures"]:
            reasons.append(
                f"failures scored >= {s.high_progress:g} rose {out['high_failure_baseline']:.2f}"
                f" -> {out['high_failure_recent']:.2f} of episodes"
            )
        return (
            f"possible reward hacking on task {out['task']!r}: "
            + "; ".join(reasons)
            + f" (last {s.window} episodes against the {s.baseline} before; "
            f"{out['episodes']} episodes so far)"
        )
