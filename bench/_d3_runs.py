"""Shared pieces of the D3 tuning and race benches (``d3_tune.py``, ``d3_race.py``).

One run = one training job through the library's own entry
(:func:`evolve_envs.training.driver.run_train`, as ``evolve-envs train`` runs it) with policy
snapshots, then every snapshot evaluated on held-out scenes by
:func:`evolve_envs.training.evaluation.evaluate_policy` (through ``d3_learning_curves``'s
``evaluate_run``), the machine's load logged while it ran (:class:`_common.LoadLog`), all kept in
one JSON-ready record so reports re-render from records alone.

The regimes: ``instant`` is the config as it is (the embedded mock reward model answers at
once, equal workers); ``slow`` adds a reward model that sleeps ``latency_ms`` per backend batch
and workers of mixed speed (``workers.step_delay_s``: ``step_ms`` times each worker's slowdown).

    >>> regime_overrides("slow", speeds=(1, 1, 3), step_ms=20, latency_ms=500)[:2]
    ['workers.num_workers=3', 'workers.step_delay_s=[0.02, 0.02, 0.06]']
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, LoadLog, load_samples

CONFIG_DIR = ROOT / "evolve_envs" / "configs" / "distrl"
BASE_CONFIG = CONFIG_DIR / "reach_place.yaml"
TUNED_CONFIG = CONFIG_DIR / "reach_place_tuned.yaml"
#: The marker the tuned config carries until ``d3_tune.py`` has written winners into it.
UNTUNED_MARK = "NOT TUNED YET"
#: Held-out scenes of the tuning runs (``held_out_seeds(n, TUNE_SCENES)``): apart from the
#: race's (offset 0, D3's 50 scenes), so the race is scored on scenes tuning never looked at.
TUNE_SCENES = 100_000
REGIMES = ("instant", "slow")


def regime_overrides(
    regime: str,
    speeds: Sequence[float] = (1.0, 1.0, 3.0),
    step_ms: float = 20.0,
    latency_ms: float = 500.0,
) -> list[str]:
    """The ``KEY=VALUE`` overrides of a regime (none for ``instant``)."""
    if regime == "instant":
        return []
    if regime != "slow":
        raise ValueError(f"regime: expected one of {REGIMES}, got {regime!r}")
    delays = [round(step_ms * float(s) / 1000.0, 6) for s in speeds]
    return [
        f"workers.num_workers={len(delays)}",
        f"workers.step_delay_s={json.dumps(delays)}",
        f"reward_model.embedded_backend_kwargs.latency_ms={latency_ms:g}",
    ]


def config_label(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def is_tuned(config: Path) -> bool:
    """Whether ``config`` holds tuned blocks (not the placeholder ``d3_tune.py`` replaces)."""
    return UNTUNED_MARK not in Path(config).read_text()


def train_run(config: Path, algo: str, run_dir: Path, minutes: float, seed: int,
              snapshot_every_s: float, overrides: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """One training job through ``run_train``; returns its final counters."""
    from evolve_envs.training.driver import TrainOptions, run_train

    res = run_train(
        TrainOptions(
            config=[str(config)],
            algo=algo,
            run_dir=run_dir,
            minutes=minutes,
            overrides=[
                *overrides,
                f"run.seed={seed}",
                f"run.snapshot_every_s={snapshot_every_s}",
                f"run.log_every_s={max(1.0, min(30.0, minutes * 3))}",
                "run.tensorboard=false",
            ],
            progress_bar=False,
            log=io.StringIO(),
        )
    )
    return {k: int(v) for k, v in res.counters.items()}


def algo_block(run_dir: Path, algo: str) -> dict[str, Any]:
    """The effective ``distrl`` or ``grpo`` block a run trained with, and its ``workers`` block
    (from the run's ``config.yaml``)."""
    from evolve_envs.training.config import read_stored

    cfg = read_stored(run_dir / "config.yaml")
    return {
        algo: cfg[algo],
        "workers": cfg["workers"],
        "reward_model.embedded_backend_kwargs": cfg["reward_model"].get("embedded_backend_kwargs"),
    }


def load_stats(samples: Sequence[float]) -> dict[str, Any]:
    """Range and mean of 1-minute load averages (NaN when none were taken)."""
    arr = np.asarray(list(samples), dtype=np.float64)
    if arr.size == 0:
        return {"min": math.nan, "max": math.nan, "mean": math.nan, "samples": []}
    return {"min": float(arr.min()), "max": float(arr.max()), "mean": float(arr.mean()),
            "samples": [float(x) for x in arr]}  # fmt: skip


def run_and_evaluate(
    *,
    config: Path,
    algo: str,
    seed: int,
    minutes: float,
    run_dir: Path,
    snapshot_every_s: float,
    eval_episodes: int,
    scene_offset: int,
    overrides: Sequence[str],
    sampled: bool = True,
) -> dict[str, Any]:
    """Train, evaluate every snapshot on ``eval_episodes`` held-out scenes from
    ``scene_offset`` (mean action; the last one also with sampled actions), and return the
    record (the load average every ``min(60 s, budget / 10)`` while it ran included)."""
    from d3_learning_curves import evaluate_run, final_sampled, last_minute

    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "load.log"
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with LoadLog(log, every_s=max(1.0, min(60.0, minutes * 6))):
        counters = train_run(config, algo, run_dir, minutes, seed, snapshot_every_s, overrides)
        curve = evaluate_run(run_dir, eval_episodes, offset=scene_offset)
        sampled_final = (
            final_sampled(run_dir, eval_episodes, seed, offset=scene_offset)
            if sampled
            else math.nan
        )
    return {
        "algo": algo,
        "seed": seed,
        "minutes": minutes,
        "config": config_label(config),
        "overrides": list(overrides),
        "block": algo_block(run_dir, algo),
        "run_dir": config_label(run_dir),
        "started_utc": started,
        "wall_s": round(time.monotonic() - t0, 1),
        "counters": counters,
        "eval_episodes": eval_episodes,
        "scene_offset": scene_offset,
        "curve": curve,
        "final_sampled": sampled_final,
        "train_last_minute": list(last_minute(run_dir / "metrics.csv")),
        "load": load_stats(load_samples(log)),
    }


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON (NaN and infinity as JSON's ``NaN`` / ``Infinity``), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def read_records(folder: Path, pattern: str = "*.json") -> list[dict[str, Any]]:
    """Every JSON record in ``folder`` matching ``pattern``, in name order."""
    return [json.loads(f.read_text()) for f in sorted(Path(folder).glob(pattern))]


def load_range(records: Sequence[dict[str, Any]]) -> str:
    """``load avg (1 min) LO-HI, mean M over N samples`` over the records' runs."""
    ones = [x for r in records for x in r.get("load", {}).get("samples", [])]
    if not ones:
        return "load avg not recorded"
    return (f"load avg (1 min) {min(ones):.1f}-{max(ones):.1f}, mean {np.mean(ones):.1f} "
            f"over {len(ones)} samples")  # fmt: skip


def ray_init(num_cpus: int) -> None:
    """A new local Ray sized like D3's (``num_cpus`` logical CPUs, a 150 MB object store) whose
    workers import the project and ``bench/``."""
    import ray
    from _distrl_env import ray_env

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             object_store_memory=150 * 1024**2, runtime_env=ray_env(),
             log_to_driver=False)  # fmt: skip
