"""Fallback rewards in a training run: counted per interval, said aloud when they start.

A reward-model call that fails pays the fallback reward (``reward_model.fail_on_request_error:
false``, the default); a run whose service died goes on, and its return, model progress and
throughput then describe the fallback, not the model. :class:`FallbackWatch` reads every metrics
row's ``episodes``, ``fallback_episodes`` and ``fallbacks`` (steps), prints one line on the
terminal when fallbacks start (and again if they come back after a clean interval) and keeps the
totals that ``summary.json`` and the command's exit status (4) report.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> watch = FallbackWatch(out)
    >>> watch.interval({"time_s": 12.0, "episodes": 4, "fallback_episodes": 0, "fallbacks": 0})
    >>> watch.interval({"time_s": 24.0, "episodes": 5, "fallback_episodes": 3, "fallbacks": 90},
    ...                reason="unreachable")
    >>> out.getvalue().split(":")[:2]
    ['evolve-envs train', ' warning']
    >>> watch.summary()["episodes"], watch.summary()["of_episodes"], watch.summary()["steps"]
    (3, 9, 90)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

__all__ = ["FallbackWatch"]


class FallbackWatch:
    """Totals of fallback rewards over a run's metrics rows, and the terminal line when they
    start (see the module docstring)."""

    def __init__(self, log: TextIO, prog: str = "evolve-envs train") -> None:
        self.log = log
        self.prog = prog
        self.episodes = 0
        self.of_episodes = 0
        self.steps = 0
        self.reason: str | None = None
        self.first_s: float | None = None
        self._failing = False

    def interval(self, row: Mapping[str, object], reason: str | None = None) -> None:
        """Count one metrics row (``reason``: the last failed call's error in it); print the
        warning when fallbacks start in it."""
        episodes = int(row.get("episodes") or 0)
        hit = int(row.get("fallback_episodes") or 0)
        steps = int(row.get("fallbacks") or 0)
        self.of_episodes += episodes
        self.episodes += hit
        self.steps += steps
        if reason:
            self.reason = reason
        failing = hit > 0 or steps > 0
        if failing and not self._failing:
            if self.first_s is None:
                self.first_s = float(row.get("time_s") or 0.0)
            cause = f" ({self.reason})" if self.reason else ""
            print(
                f"{self.prog}: warning: the reward service is failing{cause}: {hit} of "
                f"{episodes} episode(s) in the last interval got fallback rewards ({steps} "
                "step(s)); return, model progress and steps/s now measure the fallback, not the "
                "model; the run goes on and will exit 4 (reward_model.fail_on_request_error=true "
                "stops it instead)",
                file=self.log,
                flush=True,
            )
        self._failing = failing

    @property
    def degraded(self) -> bool:
        """Whether any episode of the run was scored (in part) by the fallback."""
        return self.episodes > 0 or self.steps > 0

    def summary(self) -> dict[str, object] | None:
        """``summary.json``'s ``degraded`` entry; ``None`` for a run without fallbacks."""
        if not self.degraded:
            return None
        return {
            "episodes": self.episodes,
            "of_episodes": self.of_episodes,
            "steps": self.steps,
            "since_s": self.first_s,
            "reason": self.reason,
        }
