"""What a progress model is fitted on: episodes read from a dataset, checked, labelled (``t / T``
on successes, held below ``FAILURE_CAP`` on failures) and split by whole episodes; the labels
are explained in docs/fit-reward.md. The frames stream: an episode is decoded, resized and
written to a :class:`FrameStore` (one file) before the next is read, and training reads one
batch of frames back at a time (:class:`FitSamples`).

Example:
    >>> progress_labels(4, True).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
"""

from __future__ import annotations

import io
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
    "FitSamples",
    "FrameStore",
    "UnusableDataError",
    "load_episodes",
    "progress_labels",
    "split_episodes",
]

#: a failed episode's frames are held at or below this progress
FAILURE_CAP = 0.8
_EMPTY = np.zeros((0, 0, 0, 3), np.uint8)


class UnusableDataError(ValueError):
    """The dataset cannot be fitted on (one line saying why; nothing was written)."""


@dataclass
class FitEpisode:
    """One episode's frames ``[T + 1, S, S, 3]`` (uint8, at the model's input size) and outcome.

    ``frames`` is held in memory, or (read with a store) a view of the store's file that reads
    what is indexed; ``rows`` are then the episode's rows in the store."""

    episode_id: str
    task: str
    success: bool
    frames: np.ndarray
    rows: range | None = None

    @property
    def steps(self) -> int:
        return len(self.frames) - 1


class FrameStore:
    """Frames ``[S, S, 3]`` (uint8) in one file, written an episode at a time and read back a few
    at a time through a memory map: what a fit holds is the episode it decodes and one batch,
    never the dataset. A context manager; closing it deletes the file.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, FrameStore(Path(tmp) / "frames.u8", 2) as store:
    ...     first = store.append(np.zeros((3, 2, 2, 3), np.uint8))
    ...     second = store.append(np.full((2, 2, 2, 3), 7, np.uint8))
    ...     second, store.read([3, 0])[:, 0, 0, 0].tolist(), store.rows(second).shape
    (range(3, 5), [7, 0], (2, 2, 2, 3))
    """

    def __init__(self, path: str | os.PathLike[str], size: int) -> None:
        self.path = Path(path)
        self.size = int(size)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: io.BufferedWriter | None = open(self.path, "wb")  # noqa: SIM115
        self._count = 0
        self._map: np.memmap | None = None

    def __len__(self) -> int:
        return self._count

    def __enter__(self) -> FrameStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, frames: np.ndarray) -> range:
        """Write one episode's frames ``[N, S, S, 3]``; returns their rows."""
        shape = (self.size, self.size, 3)
        if frames.dtype != np.uint8 or frames.shape[1:] != shape:
            wanted = f"uint8 [N, {self.size}, {self.size}, 3]"
            raise ValueError(f"frames are {wanted}, got {frames.dtype} {frames.shape}")
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        np.ascontiguousarray(frames).tofile(self._file)
        start, self._count = self._count, self._count + len(frames)
        return range(start, self._count)

    def _frames(self) -> np.ndarray:
        if self._map is None or len(self._map) != self._count:
            if self._file is None:
                raise ValueError(f"{self.path} is closed")
            self._file.flush()
            if not self._count:
                return np.zeros((0, self.size, self.size, 3), np.uint8)
            shape = (self._count, self.size, self.size, 3)
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r", shape=shape)
        return self._map

    def rows(self, rows: range) -> np.ndarray:
        """A view of consecutive rows (an episode's): nothing is read until it is indexed."""
        return self._frames()[rows.start : rows.stop]

    def read(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        """The frames of ``rows``, in that order, read into memory (a batch)."""
        return np.array(self._frames()[np.asarray(rows, dtype=np.int64)])

    def close(self) -> None:
        """Drop the map and delete the file (views still held keep their pages readable)."""
        self._map = None
        if self._file is not None:
            self._file.close()
            self._file = None
            self.path.unlink(missing_ok=True)


class FitSamples:
    """The frames of ``episodes`` (read into ``store``) as training samples: a label, an episode
    and a store row each; :meth:`frames` reads the frames of a batch.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, FrameStore(Path(tmp) / "frames.u8", 2) as store:
    ...     frames = np.zeros((3, 2, 2, 3), np.uint8)
    ...     episode = FitEpisode("0", "reach", True, frames, rows=store.append(frames))
    ...     samples = FitSamples([episode], store)
    ...     len(samples), samples.labels.tolist(), samples.tasks([2]), samples.frames([0, 2]).shape
    (3, [0.0, 0.5, 1.0], ['reach'], (2, 2, 2, 3))
    """

    def __init__(
        self, episodes: Sequence[FitEpisode], store: FrameStore, done_gap: float | None = None
    ) -> None:
        if any(e.rows is None for e in episodes):
            raise ValueError("every episode's frames must lie in the store (load_episodes(store=))")
        self.episodes = list(episodes)
        self.store = store
        self.labels = np.concatenate(
            [progress_labels(e.steps, e.success, done_gap) for e in self.episodes]
        )
        self.episode_of = np.concatenate(
            [np.full(len(e.rows), k, np.int64) for k, e in enumerate(self.episodes)]  # type: ignore[arg-type]
        )
        self.store_rows = np.concatenate(
            [np.arange(e.rows.start, e.rows.stop) for e in self.episodes]  # type: ignore[union-attr]
        )

    def __len__(self) -> int:
        return len(self.store_rows)

    def tasks(self, index: Sequence[int] | np.ndarray) -> list[str]:
        """The task text of each sample of ``index``."""
        return [self.episodes[k].task for k in self.episode_of[np.asarray(index, np.int64)]]

    def frames(self, index: Sequence[int] | np.ndarray) -> np.ndarray:
        """The frames ``[B, S, S, 3]`` of the samples of ``index``, read from the store."""
        return self.store.read(self.store_rows[np.asarray(index, np.int64)])


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


def _decode(path: str | os.PathLike[str], ep: Any, camera: str | None, size: int) -> np.ndarray:
    """One episode's frames at ``size`` (the decoded ones are let go on return)."""
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
    return _resize(frames[..., :3], size)


def load_episodes(
    path: str | os.PathLike[str],
    *,
    input_size: int = 64,
    camera: str | None = None,
    demonstrations: bool = False,
    on_episode: Callable[[int, int], None] | None = None,
    store: FrameStore | None = None,
) -> list[FitEpisode]:
    """Every episode of a dataset, checked and decoded one after the other; a dataset it cannot
    fit on is an :class:`UnusableDataError`. ``on_episode(done, total)`` runs after each episode
    is read. With a ``store`` (of ``input_size``) each episode's frames are written to it before
    the next is decoded, and the episodes' ``frames`` read from it; without, they are held."""
    if store is not None and store.size != input_size:
        raise ValueError(f"the store holds {store.size}-pixel frames, not {input_size}")
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
        frames = _decode(path, ep, camera, input_size)
        rows = store.append(frames) if store is not None else None
        out.append(
            FitEpisode(
                episode_id=str(ep.meta.get("episode_id") or k),
                task=str(ep.meta.get("task") or "complete the task"),
                success=bool(ep.meta.get("success", False)),
                frames=frames if store is None else _EMPTY,  # set below, from the store
                rows=rows,
            )
        )
        del frames  # with a store: held no longer than this episode
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
    if store is not None:
        for e in out:
            e.frames = store.rows(e.rows)  # type: ignore[arg-type]
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
