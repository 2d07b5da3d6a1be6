"""The cells of D5's algorithm × system 2×2 and the numbers every D5 stage reads off a curve.

A cell is an algorithm (``distrl``: DistRL's loss and replay; ``grpo``) on a system (``async``:
workers that never wait for the learner, GRPO's next round played while the last one trains;
``sync``: a barrier, DistRL's workers stopped while the learner trains). Each cell trains from
its named config (``evolve_envs/configs/distrl/reach_place_<system>.yaml``) with ``--algo``;
the one knob that switches the system is repeated as an override so a cell never depends on a
config's default.

    >>> cell_overrides("grpo_async")
    ['grpo.overlap=true']
    >>> curve = [{"env_steps": 0, "time_s": 0, "success": 0.0},
    ...          {"env_steps": 1000, "time_s": 60, "success": 0.4},
    ...          {"env_steps": 2000, "time_s": 120, "success": 0.6}]
    >>> step_at(curve, "env_steps", 1500), first_reach(curve, "env_steps", 0.5)
    (0.4, 2000.0)
    >>> round(area(curve, "env_steps", 2000), 3), last_k_mean(curve, 2)
    (0.2, 0.5)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT

CONFIG_DIR = ROOT / "evolve_envs" / "configs" / "distrl"
#: cell -> (algorithm, system)
CELLS: dict[str, tuple[str, str]] = {
    "distrl_async": ("distrl", "async"),
    "distrl_sync": ("distrl", "sync"),
    "grpo_sync": ("grpo", "sync"),
    "grpo_async": ("grpo", "async"),
    # bench/plans/d5_crossed.md: each DistRL block on the other system
    "distrl_async_barrier": ("distrl", "sync"),
    "distrl_sync_free": ("distrl", "async"),
}
#: cell -> the named config (block) it trains from, where it is not its system's own
BLOCKS: dict[str, str] = {"distrl_async_barrier": "async", "distrl_sync_free": "sync"}
#: the 2×2 of D5 (the cells a script runs when not told which)
D5_CELLS = [c for c in CELLS if c not in BLOCKS]
LABELS = {
    "distrl_async": "DistRL, asynchronous workers",
    "distrl_sync": "DistRL, synchronous barrier",
    "grpo_sync": "GRPO, synchronous rounds",
    "grpo_async": "GRPO, overlapped rounds (one version stale)",
    "distrl_async_barrier": "DistRL, asynchronous block, synchronous barrier",
    "distrl_sync_free": "DistRL, synchronous block, asynchronous workers",
}


def cell_config(cell: str) -> Path:
    """The named config a cell trains from: its system's own, or its block's (:data:`BLOCKS`).

    >>> cell_config("distrl_async_barrier").name, cell_overrides("distrl_async_barrier")
    ('reach_place_async.yaml', ['distrl.barrier=true'])
    """
    return CONFIG_DIR / f"reach_place_{BLOCKS.get(cell, CELLS[cell][1])}.yaml"


def cell_overrides(cell: str) -> list[str]:
    """The system knob of a cell, as an override."""
    algo, system = CELLS[cell]
    if algo == "distrl":
        return [f"distrl.barrier={'true' if system == 'sync' else 'false'}"]
    return [f"grpo.overlap={'true' if system == 'async' else 'false'}"]


def step_at(curve: list[dict[str, float]], key: str, x: float) -> float:
    """Success of the last snapshot at or before ``x`` (``key``: ``env_steps`` or ``time_s``);
    NaN when the run never got that far."""
    if not curve or curve[-1][key] < x:
        return math.nan
    done = [r["success"] for r in curve if r[key] <= x]
    return float(done[-1]) if done else 0.0


def first_reach(curve: list[dict[str, float]], key: str, level: float) -> float:
    """``key`` (env steps or seconds) of the first snapshot at or above ``level``; inf if none."""
    for r in curve:
        if r["success"] >= level:
            return float(r[key])
    return math.inf


def area(curve: list[dict[str, float]], key: str, upto: float) -> float:
    """Mean success over ``[0, upto]`` of ``key`` (step interpolation: each snapshot's success
    holds until the next); the part the run did not reach counts as its last value."""
    if not curve or upto <= 0:
        return math.nan
    xs = [0.0] + [min(float(r[key]), upto) for r in curve] + [upto]
    ys = [0.0] + [float(r["success"]) for r in curve]
    return float(sum((xs[i + 1] - xs[i]) * ys[i] for i in range(len(ys))) / upto)


def last_k_mean(curve: list[dict[str, float]], k: int = 3, key: str = "success") -> float:
    """Mean of ``key`` over the last ``k`` snapshots (NaN for an empty curve)."""
    vals = [float(r[key]) for r in curve[-k:] if key in r]
    return float(np.mean(vals)) if vals else math.nan


def cell_of(record: dict[str, Any]) -> str:
    """The cell a run record belongs to."""
    return str(record["cell"])
