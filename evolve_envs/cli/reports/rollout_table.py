"""The rollout report's rows: one episode's flat numbers, the degradation summary, the text
table printed at the end.

Example:
    >>> row = {"episode": 0, "steps": 3, "env_success": True, "final_progress": 97.0,
    ...        "reward_sum": 1.0, "reward_model_calls": 1, "reward_model_errors": 0,
    ...        "latency_s": {"p50": 0.002}, "done_by_progress": True, "terminated": True}
    >>> print(format_table([row]))
    ep  steps  env success  model progress  reward  calls  errors  p50 ms      done
     0      3          yes            97.0   1.000      1       0       2  progress
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["callable_name", "degradation", "episode_metrics", "format_table", "percentiles"]


def degradation(episodes: list[dict[str, JsonValue]]) -> dict[str, JsonValue] | None:
    """How many episodes and steps got fallback rewards (a reward-model call failed and its
    answer was the fallback), and why; ``None`` when none did.

    >>> degradation([{"fallback_steps": 0, "reward_model_errors": 0}]) is None
    True
    >>> degradation([{"fallback_steps": 3, "reward_model_errors": 3, "steps": 50,
    ...               "last_reward_model_error": "connection refused"},
    ...              {"fallback_steps": 0, "reward_model_errors": 0, "steps": 50}])["episodes"]
    1
    """
    hit = [e for e in episodes if e.get("fallback_steps") or e.get("reward_model_errors")]
    if not hit:
        return None
    reasons = [e.get("last_reward_model_error") for e in hit if e.get("last_reward_model_error")]
    return {
        "episodes": len(hit),
        "of_episodes": len(episodes),
        "fallback_steps": sum(int(e.get("fallback_steps") or 0) for e in hit),
        "reward_model_errors": sum(int(e.get("reward_model_errors") or 0) for e in hit),
        "steps": sum(int(e.get("steps") or 0) for e in episodes),
        "reason": reasons[-1] if reasons else "reward-model calls failed",
    }


def callable_name(fn: object) -> str:
    """``module:qualname`` of a function, for the report."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def episode_metrics(row: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """The flat numbers of one episode row (for CSV / TensorBoard / W&B)."""
    lat = row["latency_s"]
    return {
        "steps": row["steps"],
        "env_success": int(row["env_success"]),
        "final_progress": row["final_progress"],
        "max_progress": row["max_progress"],
        "reward_sum": row["reward_sum"],
        "reward_model_calls": row["reward_model_calls"],
        "reward_model_errors": row["reward_model_errors"],
        "reward_model_fallbacks": row["reward_model_fallbacks"],
        "done_by_progress": int(row["done_by_progress"]),
        "terminated": int(row["terminated"]),
        "truncated": int(row["truncated"]),
        "latency_p50_s": lat["p50"],
        "latency_max_s": lat["max"],
        "termination_precision": (row.get("termination_audit") or {}).get("precision"),
        "alarm_firing": None if row["reward_alarm"] is None else int(row["reward_alarm"]["firing"]),
    }


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(values.max())}


def format_table(episodes: list[dict[str, JsonValue]], source: str | None = None) -> str:
    """A short plain-text table of the episodes; with ``source`` (where the model's progress
    comes from) a first line says what each number is."""
    head = (
        "ep",
        "steps",
        "env success",
        "model progress",
        "reward",
        "calls",
        "errors",
        "p50 ms",
        "done",
    )
    rows = [head]
    for e in episodes:
        p50 = e["latency_s"]["p50"]
        prog = e["final_progress"]
        rows.append(
            (
                str(e["episode"]),
                str(e["steps"]),
                "yes" if e["env_success"] else "no",
                "-" if prog is None or math.isnan(prog) else f"{prog:.1f}",
                f"{e['reward_sum']:.3f}",
                str(e["reward_model_calls"]),
                str(e["reward_model_errors"]),
                "-" if p50 is None else f"{1000 * p50:.0f}",
                "progress" if e["done_by_progress"] else ("env" if e["terminated"] else "limit"),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    table = "\n".join("  ".join(v.rjust(widths[c]) for c, v in enumerate(r)) for r in rows)
    if source is None:
        return table
    return f"model progress = {source}; env success = the env's own flag\n{table}"
