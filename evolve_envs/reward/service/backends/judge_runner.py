"""PresetJudge: answers the service's questions with a judge preset through a `vlm` or `openai`
backend's transport; a malformed answer fails only its own item.

Example:
    >>> from evolve_envs.reward.service.backends.judge_presets import make_preset
    >>> class Canned:  # any object with generate() can ask
    ...     def generate(self, requests, max_new_tokens):
    ...         return ["ANSWER: 5" for _ in requests]
    >>> import numpy as np
    >>> from evolve_envs.reward.service.backends.base import DoneItem
    >>> frame = np.zeros((8, 8, 3), np.uint8)
    >>> item = DoneItem("t", frame, frame, frame)
    >>> PresetJudge(make_preset("roboreward")).done_batch(Canned(), [item])
    [(True, 1.0)]
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from evolve_envs.reward.protocol.critic_math import critic_between
from evolve_envs.reward.service.backends.base import (
    CriticItem,
    DoneItem,
    ImageScoreItem,
    VideoItem,
)
from evolve_envs.reward.service.backends.judge_presets import (
    JudgePreset,
    MalformedAnswerError,
    Request,
)

__all__ = ["PresetJudge"]

log = logging.getLogger("evolve_envs.reward.service.judge_runner")


class PresetJudge:
    """Runs a `JudgePreset` through a backend's transport."""

    def __init__(self, preset: JudgePreset) -> None:
        self.preset = preset
        self.malformed_answers = 0
        self._lock = threading.Lock()

    @property
    def pairwise_question(self) -> bool:
        """Whether the preset asks pairs directly (else two progress questions per pair)."""
        return type(self.preset).critic_request is not JudgePreset.critic_request

    def _malformed(self, exc: MalformedAnswerError) -> MalformedAnswerError:
        with self._lock:
            self.malformed_answers += 1
            count = self.malformed_answers
        log.warning("malformed %s answer #%d: %s", self.preset.name, count, exc)
        return exc

    def _ask(self, backend: Any, requests: list[Request]) -> list[tuple[object, str]]:
        """`(raw answer, printable answer)` per request, through the backend's transport."""
        if not requests:
            return []
        if self.preset.scoring == "token_probability":
            top_k = int(getattr(self.preset, "top_logprobs", 20))
            tops = backend.token_probabilities(requests, top_k)
            return [(top, json.dumps(top)) for top in tops]
        budget = getattr(backend, "max_new_tokens", None) or self.preset.max_new_tokens
        answers = backend.generate(requests, int(budget))
        return [(answer, answer) for answer in answers]

    def progress(self, backend: Any, requests: list[Request]) -> list[float | Exception]:
        """Progress in [0, 1] (or the item's MalformedAnswerError) for each request."""
        out: list[float | Exception] = []
        for raw, _ in self._ask(backend, requests):
            try:
                if self.preset.scoring == "token_probability":
                    out.append(self.preset.read_token_probabilities(raw))
                else:
                    out.append(self.preset.read_progress(raw))
            except MalformedAnswerError as exc:
                out.append(self._malformed(exc))
        return out

    def critic_batch(self, backend: Any, items: Sequence[CriticItem]) -> list[object]:
        """A critic in [-100, 100] per pair, or the pair's MalformedAnswerError."""
        if self.pairwise_question:
            out: list[object] = []
            requests = [self.preset.critic_request(it) for it in items]
            for raw, _ in self._ask(backend, [r for r in requests if r is not None]):
                try:
                    out.append(self.preset.read_critic(raw))
                except MalformedAnswerError as exc:
                    out.append(self._malformed(exc))
            return out
        requests = []
        for it in items:
            requests.append(self.preset.progress_request(it.task, [it.first, it.image_a]))
            requests.append(self.preset.progress_request(it.task, [it.first, it.image_b]))
        values = self.progress(backend, requests)
        out = []
        for a, b in zip(values[0::2], values[1::2], strict=True):
            bad = a if isinstance(a, Exception) else b if isinstance(b, Exception) else None
            out.append(bad if bad is not None else critic_between(100.0 * a, 100.0 * b))
        return out

    def done_batch(self, backend: Any, items: Sequence[DoneItem]) -> list[object]:
        """`(done, progress)` per item (progress of `curr` from the episode's first frame)."""
        requests = [self.preset.progress_request(it.task, [it.first, it.curr]) for it in items]
        return [
            p if isinstance(p, Exception) else (self.preset.is_done(p), p)
            for p in self.progress(backend, requests)
        ]

    def score_video(self, backend: Any, item: VideoItem) -> tuple[float, str | None]:
        """`(progress at the last frame, raw answer)`; a malformed answer raises."""
        request = self.preset.progress_request(item.task_text, list(item.frames))
        ((raw, shown),) = self._ask(backend, [request])
        try:
            if self.preset.scoring == "token_probability":
                return self.preset.read_token_probabilities(raw), shown
            return self.preset.read_progress(raw), shown
        except MalformedAnswerError as exc:
            raise self._malformed(exc) from None

    def score_images(self, backend: Any, items: Sequence[ImageScoreItem]) -> list[object]:
        """The progress shown by each single image."""
        return self.progress(
            backend, [self.preset.progress_request(it.prompt, [it.image]) for it in items]
        )
