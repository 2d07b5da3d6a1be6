"""VLMJudge: the questions a vision-language model is asked and how its answers are read,
shared by the `vlm` (transformers) and `openai` backends, which supply `generate`.

Example:
    >>> DEFAULT_PROMPTS["image_prompt"].startswith("How well does this image match")
    True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from evolve_envs.reward.service.backends.answer_parsing import (
    SCORE_MODES,
    parse_critic,
    parse_score,
)
from evolve_envs.reward.service.backends.base import (
    Backend,
    CriticItem,
    DoneItem,
    ImageScoreItem,
    VideoItem,
)
from evolve_envs.reward.service.backends.prompt_text import template_safe

__all__ = ["VLMJudge", "DEFAULT_PROMPTS", "DEFAULT_SYSTEM_PROMPT", "IMAGE_MARK"]

log = logging.getLogger("evolve_envs.reward.service.vlm")

DEFAULT_SYSTEM_PROMPT = "You are a careful judge of robot manipulation progress."

DEFAULT_PROMPTS = {
    "pairwise_prompt": (
        "Image-1 and Image-2 are two moments of a robot performing the task: {task}\n"
        "Compare them and judge how much closer Image-2 is to completing the task than "
        "Image-1, from -100 (all progress lost) to 100 (from no progress to done); 0 means no "
        "change. Answer with one number inside <answer></answer>."
    ),
    "progress_prompt": (
        "Image-1 shows the start of a robot episode and Image-2 shows it now. The task is: "
        "{task}\nWhat percentage of the task is complete in Image-2? Answer with a number from "
        "0 to 100 inside <answer></answer>."
    ),
    "video_prompt": (
        "These {n} images are frames of one robot episode, in order. The task is: {task}\n"
        "How well did the robot complete the task? Think briefly, then answer with a score "
        "from 0 to 100 inside <answer></answer>."
    ),
    "image_prompt": (
        "How well does this image match the description: {task}\nAnswer with a score from 0 "
        "to 100 inside <answer></answer>."
    ),
}

#: A prompt holding one `<image>` per image gets each image at its mark (else all first).
IMAGE_MARK = "<image>"


class VLMJudge(Backend):
    """A backend that asks a VLM in words; subclasses implement `generate`."""

    # --- generation -----------------------------------------------------------------------------
    def task_text(self, text: str) -> str:
        """The caller's `text` safe to format into a prompt (`prompt_text.template_safe`)."""
        pattern = getattr(self, "_template_tokens", None)
        return template_safe(text) if pattern is None else template_safe(text, pattern)

    def _set_judge_options(
        self,
        *,
        max_new_tokens: int,
        video_max_new_tokens: int,
        caller_max_new_tokens: int,
        score_mode: str,
        temperature: float,
        done_threshold: float,
        fallback_critic: float,
        fallback_score: float,
        system_prompt: str | None,
        prompts: dict[str, str],
    ) -> None:
        """The judge's settings (token budgets and caps, answer parsing, fallbacks, prompts), one
        reading for every backend that asks a VLM (this one and the openai backend)."""
        if score_mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {score_mode!r}")
        self.max_new_tokens = int(max_new_tokens)
        self.video_max_new_tokens = int(video_max_new_tokens)
        self.caller_max_new_tokens = int(caller_max_new_tokens)
        self.score_mode = score_mode
        self.temperature = float(temperature)
        self.done_threshold = float(done_threshold)
        self.fallback_critic = float(fallback_critic)
        self.fallback_score = float(fallback_score)
        self.system_prompt = system_prompt
        self.prompts = prompts

    def _set_preset(self, preset: str | None, options: dict[str, object] | None) -> None:
        """Hand the judgements to a `PresetJudge` for `preset` (None: this backend's prompts)."""
        self.judge = None
        self.preset = preset
        if preset is not None:
            from evolve_envs.reward.service.backends.judge_presets import make_preset
            from evolve_envs.reward.service.backends.judge_runner import PresetJudge

            self.judge = PresetJudge(make_preset(preset, **(options or {})))

    @property
    def malformed_answers(self) -> int:
        """Answers that broke the preset's format (0 without a preset)."""
        return self.judge.malformed_answers if self.judge is not None else 0

    def _fallback(self, kind: str, answer: str, value: float) -> float:
        self.unparsable_answers += 1
        log.warning("vlm %s answer has no number, using %s: %r", kind, value, answer[:200])
        return value

    # --- capabilities ---------------------------------------------------------------------------
    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        if self.judge is not None:
            return self.judge.critic_batch(self, items)
        answers = self.generate(
            [
                (
                    self.prompts["pairwise"].format(task=self.task_text(it.task)),
                    [it.image_a, it.image_b],
                )
                for it in items
            ],
            self.max_new_tokens,
        )
        out = []
        for answer in answers:
            critic = parse_critic(answer)
            out.append(
                self._fallback("critic", answer, self.fallback_critic) if critic is None else critic
            )
        return out

    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        if self.judge is not None:
            return self.judge.done_batch(self, items)
        answers = self.generate(
            [
                (self.prompts["progress"].format(task=self.task_text(it.task)), [it.first, it.curr])
                for it in items
            ],
            self.max_new_tokens,
        )
        out = []
        for answer in answers:
            prob = parse_score(answer, "percentage" if self.score_mode == "auto" else "unit")
            if prob is None:
                prob = self._fallback("done", answer, 0.0)
            out.append((prob * 100.0 >= self.done_threshold, prob))
        return out

    def check_video_options(self, backend_kwargs: dict[str, object]) -> dict[str, object]:
        """`score_mode` must be a known mode; `max_new_tokens` an int in
        [1, `caller_max_new_tokens`] (the server-side cap). Other keys are ignored."""
        checked: dict[str, object] = {}
        if "score_mode" in backend_kwargs:
            mode = backend_kwargs["score_mode"]
            if not isinstance(mode, str) or mode not in SCORE_MODES:
                raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {mode!r:.40}")
            checked["score_mode"] = mode
        if "max_new_tokens" in backend_kwargs:
            value = backend_kwargs["max_new_tokens"]
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"max_new_tokens must be an integer, got {value!r:.40}")
            if not 1 <= value <= self.caller_max_new_tokens:
                raise ValueError(
                    f"max_new_tokens must be in [1, {self.caller_max_new_tokens}], got {value}"
                )
            checked["max_new_tokens"] = value
        return checked

    def score_video(self, item: VideoItem) -> tuple[float, str | None]:
        if self.judge is not None:
            return self.judge.score_video(self, item)
        kwargs = self.check_video_options(item.options.get("backend_kwargs") or {})
        mode = kwargs.get("score_mode", self.score_mode)
        if mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {mode!r}")
        prompt = self.prompts["video"].format(
            task=self.task_text(item.task_text), n=len(item.frames)
        )
        max_new = int(kwargs.get("max_new_tokens", self.video_max_new_tokens))
        (answer,) = self.generate(
            [(prompt, list(item.frames))], max_new, stop=item.options.get("stop_event")
        )
        score = parse_score(answer, mode)
        if score is None:
            score = self._fallback("video", answer, self.fallback_score)
        return score, answer

    def score_images(self, items: Sequence[ImageScoreItem]) -> list[float]:
        if self.judge is not None:
            return self.judge.score_images(self, items)
        answers = self.generate(
            [
                (self.prompts["image"].format(task=self.task_text(it.prompt)), [it.image])
                for it in items
            ],
            self.max_new_tokens,
        )
        out = []
        for answer in answers:
            score = parse_score(answer, self.score_mode)
            out.append(
                self._fallback("image", answer, self.fallback_score) if score is None else score
            )
        return out
