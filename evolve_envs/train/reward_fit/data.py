"""What a progress model is fitted on: episodes read from a dataset, checked, labelled (``t / T``
on successes, held below ``FAILURE_CAP`` on failures) and split by whole episodes; the labels
are explained in docs/fit-reward.md.

Example:
    >>> progress_labels(4, True).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FAILURE_CAP",
    "FitEpisode",
    "UnusableDataError",
    "load_episodes",
    "progress_labels",
    "split_episodes",
]

#: a failed episode's frames are held at or below this progress
FAILURE_CAP = 0.8


class UnusableDataError(ValueError):
    """The dataset cannot be fitted on (one line saying why; nothing was written)."""


@dataclass
class FitEpisode:
    """One episode's frames ``[T + 1, S, S, 3]`` (uint8, at the model's input size) and outcome."""

    episode_id: str
    task: str
    success: bool
    frames: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.frames) - 1


def progress_labels(steps: int, success: bool, done_gap: float | None = None) -> np.ndarray:
    """Per-frame labels: ``t / steps`` on a success, NaN (no target, capped) on a failure.

    With ``done_gap`` a success's frames before its last are ``t / steps * done_gap`` and its
    last is 1: the step into done stands apart from every frame before it.

    >>> [round(float(v), 2) for v in progress_labels(4, True, done_gap=0.8)]
    [0.0, 0.2, 0.4, 0.6, 1.0]
    """
    if not success:
        return np.full(steps + 1, np.nan, np.float32)
    if done_gap is None:
        return (np.arange(steps + 1, dtype=np.float32) / max(steps, 1)).astype(np.float32)
    labels = np.arange(steps + 1, dtype=np.float64) / max(steps, 1)
    labels[:-1] *= done_gap
    return labels.astype(np.float32)


def _resize(frames: np.ndarray, size: int) -> np.ndarray:
    if frames.shape[1:3] == (size, size):
        return frames.astype(np.uint8, copy=False)
    from PIL import Image

    return np.stack(
        [
            np.asarray(Image.fromarray(f).resize((size, size), Image.Resampling.BILINEAR))
            for f in frames
        ]
    )


def _open(path: str | os.PathLike[str], camera: str | None) -> Any:
    from evolve_envs.recording.episodes import open_recording
    from evolve_envs.recording.shipped import resolve_recording

    try:
        root = resolve_recording(path)
    except (OSError, ValueError) as exc:
        raise UnusableDataError(f"{path}: {exc}") from None
    lerobot = (Path(root) / "meta" / "info.json").is_file()
    if not lerobot and not (Path(root) / "meta.json").is_file():
        raise UnusableDataError(
            f"{path} is neither a LeRobotDataset v3 folder (meta/info.json) "
            "nor a recording (meta.json)"
        )
    try:
        return open_recording(root, **({"camera": camera} if lerobot and camera else {}))
    except (OSError, ValueError, KeyError) as exc:
        raise UnusableDataError(f"{path}: {exc}") from None


def load_episodes(
    path: str | os.PathLike[str],
    *,
    input_size: int = 64,
    camera: str | None = None,
    demonstrations: bool = False,
    on_episode: Callable[[int, int], None] | None = None,
) -> list[FitEpisode]:
    """Every episode of a dataset, checked and decoded; a dataset it cannot fit on is an
    :class:`UnusableDataError`. ``on_episode(done, total)`` runs after each episode is read."""
    recording = _open(path, camera)
    episodes = list(recording)
    if len(episodes) < 2:
        raise UnusableDataError(
            f"{path} has {len(episodes)} episode(s); fitting needs at least "
            "two (whole episodes are held out)"
        )
    first = episodes[0]
    if first.meta.get("success_known") is False and not demonstrations:
        raise UnusableDataError(
            f"{path} has no success flag (next.success); pass "
            "--demonstrations if every episode is a success"
        )
    if camera is not None and hasattr(first, "root") and camera not in first.cameras:
        raise UnusableDataError(
            f"{path} has no camera {camera!r} (cameras: {', '.join(first.cameras)})"
        )
    out: list[FitEpisode] = []
    for k, ep in enumerate(episodes):
        try:
            picks = camera if hasattr(ep, "root") else None
            frames = ep.frames(camera=picks)
        except (OSError, ValueError, IndexError, KeyError) as exc:
            raise UnusableDataError(
                f"{path}: episode {ep.meta.get('episode_id')!r} cannot be read: {exc}"
            ) from None
        if frames.ndim != 4 or frames.shape[-1] < 3:
            raise UnusableDataError(
                f"{path}: episode {ep.meta.get('episode_id')!r} has no RGB "
                f"frames (shape {frames.shape})"
            )
        out.append(
            FitEpisode(
                episode_id=str(ep.meta.get("episode_id") or k),
                task=str(ep.meta.get("task") or "complete the task"),
                success=bool(ep.meta.get("success", False)),
                frames=_resize(frames[..., :3], input_size),
            )
        )
        if on_episode is not None:
            on_episode(k + 1, len(episodes))
    if not any(e.success for e in out):
        raise UnusableDataError(
            f"{path} has no successful episode: progress labels come from successes"
        )
    if sum(e.success for e in out) < 2:
        raise UnusableDataError(
            f"{path} has one successful episode; fitting needs two (one to fit on, one held out)"
        )
    return out


def split_episodes(
    episodes: Sequence[FitEpisode], held_out: float, *, seed: int
) -> tuple[list[FitEpisode], list[FitEpisode]]:
    """``(train, held_out)`` by whole episodes: ``held_out`` of the successes and of the failures
    (at least one success on each side), drawn from ``seed``."""
    if not 0 < held_out < 1:
        raise ValueError(f"held_out is a fraction in (0, 1), got {held_out}")
    rng = np.random.default_rng(seed)
    train: list[FitEpisode] = []
    held: list[FitEpisode] = []
    for outcome in (True, False):
        group = [e for e in episodes if e.success is outcome]
        order = rng.permutation(len(group))
        n = int(math.floor(len(group) * held_out + 0.5))
        if outcome:
            n = min(max(n, 1), len(group) - 1)
        held += [group[i] for i in order[:n]]
        train += [group[i] for i in order[n:]]
    return train, held
