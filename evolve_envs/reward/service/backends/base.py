"""The backend interface: what a reward model implements to be served (capabilities, batches of
decoded frames, answers held to `RESULT_RANGES`); docs/reward-models.md, "How the backends answer".

Example:
    >>> class Constant(Backend):
    ...     name = "constant"
    ...     def critic_batch(self, items):
    ...         return [0.0 for _ in items]
    >>> Constant().capabilities().pairwise
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from evolve_envs.reward.protocol.wire import Capabilities

#: Environment variable naming the model directory when neither `--ckpt-path` nor the
#: `ckpt_path` kwarg does (the name VLAC's tooling uses, shared by every model backend).
CKPT_ENV = "VLAC_CKPT_PATH"

__all__ = [
    "Backend",
    "BackendError",
    "NotSupportedError",
    "MalformedAnswerError",
    "OutOfRangeError",
    "RESULT_RANGES",
    "check_range",
    "CriticItem",
    "DoneItem",
    "ImageScoreItem",
    "VideoItem",
    "OPTIONAL_CAPABILITIES",
]

OPTIONAL_CAPABILITIES = ("pairwise", "done", "video", "image_score")

Frame = np.ndarray


class BackendError(RuntimeError):
    """A backend failed to answer (model error, bad model output it cannot recover from)."""


class NotSupportedError(BackendError):
    """The backend does not offer the requested capability (the server answers 501)."""

    def __init__(self, backend: str, capability: str) -> None:
        super().__init__(f"backend {backend!r} does not support {capability!r}")
        self.backend = backend
        self.capability = capability


class MalformedAnswerError(BackendError):
    """A model's answer breaks its format (502, counted); returned in place of one item or
    raised."""

    def __init__(self, preset: str, answer: str, expected: str) -> None:
        super().__init__(
            f"{preset} answer does not match {expected}: {answer[:200]!r}"
            if answer
            else f"{preset} answer is empty (expected {expected})"
        )
        self.preset = preset
        self.answer = answer


class OutOfRangeError(BackendError):
    """A backend's answer is not finite or outside its documented range (`RESULT_RANGES`)."""


#: The documented range of each kind of answer: `critic` (pairwise critics), `done` (done
#: probabilities), `video` (`/score`) and `image` (pickle scores).
RESULT_RANGES: dict[str, tuple[float, float]] = {
    "critic": (-100.0, 100.0),
    "done": (0.0, 1.0),
    "video": (-100.0, 100.0),
    "image": (-100.0, 100.0),
}


def check_range(kind: str, value: object) -> float:
    """`value` as a float within the range of `kind` (rounding past an end clipped), else raises.

    Example:
        >>> check_range("done", 0.25), check_range("critic", 100.0 + 1e-12)
        (0.25, 100.0)
    """
    low, high = RESULT_RANGES[kind]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise OutOfRangeError(f"{kind} answer {value!r:.40} is not a number") from None
    if not math.isfinite(number) or not low - 1e-6 <= number <= high + 1e-6:
        raise OutOfRangeError(f"{kind} answer {number!r} is outside [{low}, {high}]")
    return min(max(number, low), high)


@dataclass(frozen=True)
class CriticItem:
    """One pair: how much closer `image_b` is to finishing `task` than `image_a` (`first`:
    episode's)."""

    task: str
    image_a: Frame
    image_b: Frame
    first: Frame
    reference: tuple[Frame, ...] | None = None


@dataclass(frozen=True)
class DoneItem:
    """One completion question about `curr` (with the episode's first and previous frames)."""

    task: str
    first: Frame
    prev: Frame
    curr: Frame
    reference: tuple[Frame, ...] | None = None


@dataclass(frozen=True)
class ImageScoreItem:
    """One image to score against a text prompt (pickle-scorer protocol)."""

    prompt: str
    image: Frame
    metadata: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class VideoItem:
    """One episode video, already sampled to at most `nframes` frames, to score for `task_text`."""

    task_text: str
    frames: tuple[Frame, ...]
    options: dict[str, object] = field(default_factory=dict)


class Backend(ABC):
    """Base class of every reward backend: set `name`, implement `critic_batch`, override the
    rest."""

    name: ClassVar[str] = "backend"

    def __init__(self, *, disabled: Iterable[str] = ()) -> None:
        disabled = tuple(disabled)
        unknown = sorted(set(disabled) - set(OPTIONAL_CAPABILITIES))
        if unknown:
            raise ValueError(
                f"cannot disable {unknown}: optional capabilities are {list(OPTIONAL_CAPABILITIES)}"
            )
        self._disabled = frozenset(disabled)

    # --- required -----------------------------------------------------------------------------
    @abstractmethod
    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        """Critic in [-100, 100] for each item, in order."""

    # --- optional -----------------------------------------------------------------------------
    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        """`(done, prob)` for each item, in order."""
        raise NotSupportedError(self.name, "done")

    def score_video(self, item: VideoItem) -> tuple[float, str | None]:
        """`(score, raw_text)` for one episode video."""
        raise NotSupportedError(self.name, "video")

    def score_images(self, items: Sequence[ImageScoreItem]) -> list[float]:
        """One score per image, in order."""
        raise NotSupportedError(self.name, "image_score")

    def check_video_options(self, backend_kwargs: dict[str, object]) -> dict[str, object]:
        """The caller's `/score` `backend_kwargs`, checked before any work (`ValueError`: 422)."""
        return dict(backend_kwargs)

    def close(self) -> None:
        """Release model resources (called once at server shutdown)."""
        return None

    # --- capabilities -------------------------------------------------------------------------
    def _implements(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(Backend, method)

    def supports(self, capability: str) -> bool:
        """Whether this backend can serve `capability` (`progress` is always true)."""
        if capability == "progress":
            return True
        if capability in self._disabled:
            return False
        method = {
            "pairwise": "critic_batch",
            "done": "done_batch",
            "video": "score_video",
            "image_score": "score_images",
        }.get(capability)
        if method is None:
            raise ValueError(f"unknown capability {capability!r}")
        return self._implements(method)

    def model_identity(self) -> tuple[str | None, str | None]:
        """`(model_id, model_revision)` of the model behind this backend (None: unknown)."""
        return getattr(self, "model_id", None), getattr(self, "model_revision", None)

    def capabilities(self) -> Capabilities:
        """The `GET /capabilities` answer, with who answers (model id, revision, config hash)."""
        model_id, revision = self.model_identity()
        return Capabilities(
            backend=self.name,
            progress=True,
            pairwise=self.supports("pairwise"),
            done=self.supports("done"),
            video=self.supports("video"),
            image_score=self.supports("image_score"),
            model_id=model_id,
            model_revision=revision,
            config_hash=getattr(self, "config_hash", None),
        )
