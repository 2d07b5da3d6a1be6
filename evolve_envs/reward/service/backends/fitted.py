"""FittedProgressBackend: a progress model fitted with ``evolve-envs fit-reward``, served from its
model directory (``ckpt_path``, ``--ckpt-path`` or ``$VLAC_CKPT_PATH``; never downloaded).

Example:
    >>> backend = FittedProgressBackend("/models/reach-place")  # doctest: +SKIP
    >>> backend.model_identity()  # doctest: +SKIP
    ('reach-place', 'sha256:0c1d...')
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from evolve_envs.reward.protocol.critic_math import critic_between
from evolve_envs.reward.service.backends.base import (
    CKPT_ENV,
    Backend,
    BackendError,
    CriticItem,
    DoneItem,
    ImageScoreItem,
)

__all__ = ["FittedProgressBackend"]


class FittedProgressBackend(Backend):
    """Serves a fitted progress model directory (see the module docstring).

    Args:
        ckpt_path: the model directory (default ``$VLAC_CKPT_PATH``).
        device: ``auto`` (GPU if there is one), ``cpu``, ``cuda``, ``cuda:1``...
        done_threshold: progress in [0, 1] at which a frame is done (default: the model's).
        threads: torch's CPU threads in this process (None: torch's default). One by default:
            on a shared CPU more threads wait on each other (a pair of frames took 18 ms with
            one thread and 250 ms with two on a busy 2-core machine).
        disabled: optional capabilities switched off.
    """

    name = "fitted"

    def __init__(
        self,
        ckpt_path: str | None = None,
        device: str = "auto",
        done_threshold: float | None = None,
        threads: int | None = 1,
        disabled: Iterable[str] = (),
    ) -> None:
        super().__init__(disabled=disabled)
        from evolve_envs.reward.service.backends.progress_net import content_hash, load_model

        path = ckpt_path or os.environ.get(CKPT_ENV)
        if not path:
            raise BackendError(
                f"the fitted backend needs a model directory: ckpt_path, --ckpt-path or ${CKPT_ENV}"
            )
        from evolve_envs.reward.models import resolve_model

        try:
            path = resolve_model(path)
            self.net = load_model(path, device=device)
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot load the progress model {path}: {exc}") from exc
        self.ckpt_path = str(path)
        self.device = self.net.device
        if self.device == "cpu" and threads:  # this process serves one model: its CPU threads
            import torch

            torch.set_num_threads(int(threads))
        threshold = self.net.config.done_threshold if done_threshold is None else done_threshold
        if not 0 < float(threshold) <= 1:
            raise ValueError(f"done_threshold is a progress in (0, 1], got {threshold}")
        self.done_threshold = float(threshold)
        self.model_id = self.net.config.name
        self.model_revision = content_hash(path)

    def percent(self, frames: Sequence[np.ndarray], tasks: Sequence[str]) -> list[float]:
        """Progress in percent of each frame for its task; a frame judged done reads 100."""
        unique: dict[tuple[int, str], int] = {}
        picks, texts = [], []
        for frame, task in zip(frames, tasks, strict=True):
            key = (id(frame), task)
            if key not in unique:
                unique[key] = len(picks)
                picks.append(frame)
                texts.append(task)
        if not picks:
            return []
        try:
            values = self.net.predict(picks, texts)
        except RuntimeError as exc:  # torch: out of memory, a device gone
            raise BackendError(f"progress model failed: {exc}") from exc
        out = [100.0 if v >= self.done_threshold else 100.0 * float(v) for v in values]
        return [out[unique[(id(f), t)]] for f, t in zip(frames, tasks, strict=True)]

    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        frames = [f for it in items for f in (it.image_a, it.image_b)]
        tasks = [it.task for it in items for _ in range(2)]
        p = self.percent(frames, tasks)
        return [critic_between(p[2 * i], p[2 * i + 1]) for i in range(len(items))]

    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        p = self.percent([it.curr for it in items], [it.task for it in items])
        return [(v >= 100.0 * self.done_threshold, v / 100.0) for v in p]

    def score_images(self, items: Sequence[ImageScoreItem]) -> list[float]:
        return [
            v / 100.0 for v in self.percent([it.image for it in items], [it.prompt for it in items])
        ]

    def close(self) -> None:
        self.net = None  # type: ignore[assignment]
