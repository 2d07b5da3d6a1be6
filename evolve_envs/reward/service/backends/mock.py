"""MockBackend: a deterministic stand-in reward model (no weights) for tests and demos; its rules
and knobs are in docs/reward-models.md ("How the backends answer").

Example:
    >>> import numpy as np
    >>> frame = np.full((64, 64, 3), paint_level(40), np.uint8)
    >>> intensity_progress(frame)
    40
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

import numpy as np

from evolve_envs.reward.protocol.critic_math import critic_between
from evolve_envs.reward.service.backends import scene_rules
from evolve_envs.reward.service.backends.base import (
    Backend,
    BackendError,
    CriticItem,
    DoneItem,
    ImageScoreItem,
    VideoItem,
)

__all__ = [
    "RULES",
    "MockBackend",
    "check_rule",
    "intensity_progress",
    "change_progress",
    "paint_level",
    "mock_critic",
]

#: The rules the mock backend knows (see the module docstring).
RULES = ("intensity", "change", "reach_place", "reach_place_hackable", "random")
_SCENE_RULES = ("reach_place", "reach_place_hackable", "random")
_GRAY = np.array([0.299, 0.587, 0.114], dtype=np.float64)


def check_rule(rule: object) -> str:
    """``rule`` if the mock backend knows it, else a one-line ``ValueError`` naming the rules."""
    if rule in RULES:
        return str(rule)
    import difflib

    close = difflib.get_close_matches(str(rule), RULES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown mock rule {rule!r}{hint}; rules: {', '.join(RULES)}")


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def paint_level(progress: float) -> int:
    """Grey level (0..255) that the intensity rule reads back as `progress` percent."""
    if not 0 <= progress <= 100:
        raise ValueError(f"progress must be in [0, 100], got {progress}")
    return _round_half_up(progress * 255 / 100)


def _crop(frame: np.ndarray, region: Sequence[float] | None) -> np.ndarray:
    if region is None:
        return frame
    top, left, bottom, right = region
    h, w = frame.shape[:2]
    y0, y1 = int(round(top * h)), max(int(round(bottom * h)), int(round(top * h)) + 1)
    x0, x1 = int(round(left * w)), max(int(round(right * w)), int(round(left * w)) + 1)
    return frame[y0:y1, x0:x1]


def _gray(frame: np.ndarray) -> np.ndarray:
    if frame.ndim == 2:
        return frame.astype(np.float64)
    return frame[..., :3].astype(np.float64) @ _GRAY


def intensity_progress(frame: np.ndarray, region: Sequence[float] | None = None) -> int:
    """`round(100 * mean(gray(frame[region])) / 255)` as an int in 0..100."""
    return _round_half_up(100.0 * float(_gray(_crop(frame, region)).mean()) / 255.0)


def change_progress(
    frame: np.ndarray,
    first: np.ndarray,
    change_scale: float = 64.0,
    region: Sequence[float] | None = None,
) -> int:
    """`min(100, 100 * mean|f - f0| / change_scale)` (grey levels), rounded to an int."""
    a = _crop(frame, region).astype(np.float64)
    b = _crop(first, region).astype(np.float64)
    if a.shape != b.shape:
        raise BackendError(f"frames differ in shape: {a.shape} vs {b.shape}")
    diff = float(np.abs(a - b).mean())
    return min(100, _round_half_up(100.0 * diff / change_scale))


#: The mock's critic: the one VLAC's accumulation maps from `pa` to `pb` (clamped to ±100).
mock_critic = critic_between


class MockBackend(Backend):
    """Deterministic reward model (rules and knobs: docs/reward-models.md)."""

    name = "mock"

    def __init__(
        self,
        rule: str = "intensity",
        region: Sequence[float] | None = None,
        change_scale: float = 64.0,
        latency_ms: float = 0.0,
        done_threshold: float = 95.0,
        disabled: Iterable[str] = (),
        fail_marker: str | None = None,
        seed: int = 0,
        model_id: str | None = None,
        answer_override: float | None = None,
    ) -> None:
        super().__init__(disabled=disabled)
        check_rule(rule)
        if region is not None:
            region = tuple(float(v) for v in region)
            if len(region) != 4 or not (
                0 <= region[0] < region[2] <= 1 and 0 <= region[1] < region[3] <= 1
            ):
                raise ValueError(
                    f"region must be fractions [top, left, bottom, right] with top < bottom and "
                    f"left < right, got {region}"
                )
        if change_scale <= 0:
            raise ValueError(f"change_scale must be > 0, got {change_scale}")
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
        self.rule = rule
        self.region = region
        self.change_scale = float(change_scale)
        self.latency_ms = float(latency_ms)
        self.done_threshold = float(done_threshold)
        self.fail_marker = fail_marker
        self.seed = int(seed)
        self.model_id = model_id or f"mock-{rule}"
        self.model_revision = f"seed-{self.seed}"
        self.answer_override = None if answer_override is None else float(answer_override)

    # --- helpers --------------------------------------------------------------------------------
    def progress(self, frame: np.ndarray, first: np.ndarray | None = None) -> int:
        """Progress of `frame` (integer percent) under the configured rule."""
        if self.rule in _SCENE_RULES:
            return self._scene_progress(frame)
        if self.rule == "change" and first is not None:
            return change_progress(frame, first, self.change_scale, self.region)
        if self.rule == "change":
            return 0
        return intensity_progress(frame, self.region)

    def _scene_progress(self, frame: np.ndarray) -> int:
        if self.rule == "reach_place":
            return scene_rules.reach_place_progress(frame)
        if self.rule == "reach_place_hackable":
            return scene_rules.hackable_progress(frame)
        return scene_rules.random_progress(frame, self.seed)

    def _emulate_inference(self, texts: Iterable[str]) -> None:
        if self.fail_marker:
            for text in texts:
                if self.fail_marker in text:
                    raise BackendError(f"mock backend failure requested by {self.fail_marker!r}")
        if self.latency_ms > 0:
            time.sleep(self.latency_ms / 1000.0)

    # --- capabilities ---------------------------------------------------------------------------
    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        self._emulate_inference(item.task for item in items)
        if self.answer_override is not None:
            return [self.answer_override for _ in items]
        return [
            mock_critic(self.progress(it.image_a, it.first), self.progress(it.image_b, it.first))
            for it in items
        ]

    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        self._emulate_inference(item.task for item in items)
        out = []
        for it in items:
            p = self.progress(it.curr, it.first)
            prob = p / 100.0 if self.answer_override is None else self.answer_override
            out.append((p >= self.done_threshold, prob))
        return out

    def score_video(self, item: VideoItem) -> tuple[float, str | None]:
        self._emulate_inference([item.task_text])
        if not item.frames:
            raise BackendError("video has no frames")
        p = self.progress(item.frames[-1], item.frames[0])
        return (p / 100.0 if self.answer_override is None else self.answer_override), None

    def score_images(self, items: Sequence[ImageScoreItem]) -> list[float]:
        self._emulate_inference(item.prompt for item in items)
        if self.answer_override is not None:
            return [self.answer_override for _ in items]
        if self.rule in _SCENE_RULES:
            return [self._scene_progress(it.image) / 100.0 for it in items]
        return [intensity_progress(it.image, self.region) / 100.0 for it in items]
