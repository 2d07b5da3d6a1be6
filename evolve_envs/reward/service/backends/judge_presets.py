"""Judge presets: a published reward model's prompt (``roboreward``, ``robodopamine``,
``topreward``) and a strict reader of its answer (:class:`MalformedAnswerError`, never 0).

Example:
    >>> preset = make_preset("roboreward")
    >>> preset.read_progress("The drawer is open.\\nANSWER: 4")
    0.75
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from evolve_envs.reward.service.backends.answer_parsing import strip_think
from evolve_envs.reward.service.backends.base import CriticItem, MalformedAnswerError
from evolve_envs.reward.service.backends.prompt_text import template_safe

__all__ = [
    "PRESETS",
    "JudgePreset",
    "MalformedAnswerError",
    "RoboRewardPreset",
    "RoboDopaminePreset",
    "TopRewardPreset",
    "make_preset",
    "true_probability",
]

#: One question to a model: the prompt text and its images, in order.
Request = tuple[str, list[np.ndarray]]


class JudgePreset(ABC):
    """A reward model's prompts and answer reader; `scoring` is ``"text"`` or
    ``"token_probability"``."""

    name: ClassVar[str] = "preset"
    scoring: ClassVar[str] = "text"
    #: generation budget of one answer (text presets)
    max_new_tokens: ClassVar[int] = 16

    def __init__(self, done_threshold: float = 0.95) -> None:
        if not 0.0 <= float(done_threshold) <= 1.0:
            raise ValueError(f"done_threshold must be in [0, 1], got {done_threshold}")
        self.done_threshold = float(done_threshold)

    @abstractmethod
    def progress_request(self, task: str, frames: Sequence[np.ndarray]) -> Request:
        """The question whose answer is the progress of the last of `frames` (first frame first)."""

    def read_progress(self, answer: str) -> float:
        """Progress in [0, 1] from a text answer; raises `MalformedAnswerError`."""
        raise NotImplementedError(f"{self.name} answers are token probabilities, not text")

    def read_token_probabilities(self, top: Mapping[str, float]) -> float:
        """Progress in [0, 1] from the next-token probabilities (token text -> probability)."""
        raise NotImplementedError(f"{self.name} answers are text")

    def critic_request(self, item: CriticItem) -> Request | None:
        """A direct pairwise question, or None: the critic comes from two progress answers."""
        return None

    def read_critic(self, answer: str) -> float:
        """A critic in [-100, 100] from the answer to `critic_request`."""
        raise NotImplementedError(f"{self.name} has no pairwise question")

    def is_done(self, progress: float) -> bool:
        """Whether a progress in [0, 1] means the task is complete."""
        return progress >= self.done_threshold


# ------------------------------------------------------------------------------------ RoboReward
ROBOREWARD_PROMPT = (
    "Given the task, assign a discrete progress score reward (1,2,3,4,5) for the robot in the "
    "video in the format: ANSWER: <score>\n"
    "Rubric for end-of-episode progress (judge only the final state without time limits):\n"
    "1 - No Success: Final state shows no goal-relevant change for the command.\n"
    "2 - Minimal Progress: Final state shows a small but insufficient change toward the goal.\n"
    "3 - Partial Completion: The final state shows good progress toward the goal but violates "
    "more than one requirement or a major requirement.\n"
    "4 - Near Completion: Final state is correct in region and intent but misses a single minor "
    "requirement.\n"
    "5 - Perfect Completion: Final state satisfies all requirements.\n"
    "Task: {task}"
)

_ANSWER_LINE = re.compile(r"ANSWER:\s*(\S+)", re.IGNORECASE)


class RoboRewardPreset(JudgePreset):
    """RoboReward's rubric prompt and ``ANSWER: <n>`` reader; progress ``(n - 1) / 4``.

    Example:
        >>> RoboRewardPreset().read_progress("ANSWER: 3")
        0.5
    """

    name = "roboreward"
    max_new_tokens = 16

    def __init__(self, done_threshold: float = 1.0, prompt: str = ROBOREWARD_PROMPT) -> None:
        super().__init__(done_threshold)
        self.prompt = prompt

    def progress_request(self, task: str, frames: Sequence[np.ndarray]) -> Request:
        return self.prompt.format(task=template_safe(task)), list(frames)

    @staticmethod
    def read_score(answer: str) -> int:
        """The integer n in 1..5 of exactly one ``ANSWER: <n>``; raises `MalformedAnswerError`."""
        found = _ANSWER_LINE.findall(strip_think(answer))
        expected = "'ANSWER: <n>' with one integer n in 1..5"
        if len(found) != 1:
            raise MalformedAnswerError("roboreward", answer, expected)
        token = found[0].rstrip(".")
        if not token.isdigit() or not 1 <= int(token) <= 5:
            raise MalformedAnswerError("roboreward", answer, expected)
        return int(token)

    def read_progress(self, answer: str) -> float:
        return (self.read_score(answer) - 1) / 4.0


# ---------------------------------------------------------------------------------- Robo-Dopamine
ROBODOPAMINE_PROMPT = (
    "You are a rigorous, impartial vision evaluator for robot task progress. Judge whether the "
    "AFTER image moves closer to the task objective than the BEFORE image, using the reference "
    "images only as anchors.\n\n<Task>\n`{task}`\n\n"
    "REFERENCE START - Robot Front Image (task just starting): <image>\n"
    "{end_line}</Task>\n\n"
    "BEFORE Robot Front Image: <image>\n\nAFTER Robot Front Image: <image>\n\n"
    "Place BEFORE and AFTER on the START-to-END continuum. AFTER better than BEFORE: positive; "
    "worse: negative; essentially the same: 0. For an improvement, scale it to what remained "
    "from BEFORE to END; for a regression, scale it to how far BEFORE had progressed from "
    "START. Clip to [-100%, +100%] and round to an integer percent.\n\n"
    "Output Format (STRICT)\nReturn ONLY one line containing the score wrapped in <score> tags, "
    "as an integer percentage with a percent sign:\n"
    "<score>+NN%</score>  or  <score>-NN%</score>  or  <score>0%</score>"
)
_END_LINE = "REFERENCE END - Robot Front Image (task fully completed): <image>\n"

_SCORE_TAG = re.compile(r"<score>\s*([+-]?\d+)\s*%\s*</score>", re.IGNORECASE)


class RoboDopaminePreset(JudgePreset):
    """Robo-Dopamine GRM's hop prompt (START, END, BEFORE, AFTER) and ``<score>±NN%</score>``
    reader.

    Example:
        >>> RoboDopaminePreset().read_critic("<score>-20%</score>")
        -20.0
    """

    name = "robodopamine"
    max_new_tokens = 16

    def __init__(self, done_threshold: float = 0.95, prompt: str = ROBODOPAMINE_PROMPT) -> None:
        super().__init__(done_threshold)
        self.prompt = prompt

    def _request(
        self,
        task: str,
        start: np.ndarray,
        before: np.ndarray,
        after: np.ndarray,
        end: np.ndarray | None,
    ) -> Request:
        end_line = _END_LINE if end is not None else ""
        text = self.prompt.format(task=template_safe(task), end_line=end_line)
        images = [start] + ([end] if end is not None else []) + [before, after]
        return text, images

    def critic_request(self, item: CriticItem) -> Request:
        end = item.reference[-1] if item.reference else None
        return self._request(item.task, item.first, item.image_a, item.image_b, end)

    def progress_request(self, task: str, frames: Sequence[np.ndarray]) -> Request:
        # "forward" hop: BEFORE is the first frame, so the hop is the progress made so far
        return self._request(task, frames[0], frames[0], frames[-1], None)

    @staticmethod
    def read_hop(answer: str) -> float:
        """The hop in [-100, 100] of exactly one ``<score>±NN%</score>``."""
        found = _SCORE_TAG.findall(strip_think(answer))
        expected = "one '<score>+NN%</score>' with an integer in [-100, 100]"
        if len(found) != 1 or not -100 <= int(found[0]) <= 100:
            raise MalformedAnswerError("robodopamine", answer, expected)
        return float(int(found[0]))

    def read_critic(self, answer: str) -> float:
        return self.read_hop(answer)

    def read_progress(self, answer: str) -> float:
        return min(1.0, max(0.0, self.read_hop(answer) / 100.0))


# ------------------------------------------------------------------------------------ TOPReward
TOPREWARD_PROMPT = (
    "The images are frames of a robot episode, in order. The robot's task is: {task}\n"
    "Has the robot completed the task? Answer with exactly one word: True or False."
)


def true_probability(top: Mapping[str, float], *, normalize: bool = False) -> float:
    """P("True") from next-token probabilities (spaces and case ignored), or `MalformedAnswerError`.

    >>> round(true_probability({"True": 0.6, " true": 0.1, "False": 0.2}), 3)
    0.7
    """
    p_true = p_false = 0.0
    seen = False
    for token, prob in top.items():
        word = token.strip().lower()
        if word in ("true", "false"):
            seen = True
            if not (math.isfinite(prob) and 0.0 <= prob <= 1.0 + 1e-6):
                raise MalformedAnswerError("topreward", f"{token!r}: {prob}", "a probability")
            if word == "true":
                p_true += prob
            else:
                p_false += prob
    if not seen:
        shown = ", ".join(f"{t!r}" for t in list(top)[:8])
        raise MalformedAnswerError("topreward", shown, "'True' or 'False' among the top tokens")
    if normalize:
        total = p_true + p_false
        return p_true / total if total > 0 else 0.0
    return min(1.0, p_true)


class TopRewardPreset(JudgePreset):
    """TOPReward: progress is P("True") to "is the task complete?" from token probabilities.

    Args:
        done_threshold: P(True) at which the task counts as done.
        normalize: divide by P(True) + P(False) (both among the top tokens).
        top_logprobs: how many next-token alternatives to ask an OpenAI-compatible server for.

    Example:
        >>> TopRewardPreset().read_token_probabilities({"True": 0.9, "False": 0.1})
        0.9
    """

    name = "topreward"
    scoring = "token_probability"
    max_new_tokens = 1

    def __init__(
        self,
        done_threshold: float = 0.5,
        normalize: bool = False,
        top_logprobs: int = 20,
        prompt: str = TOPREWARD_PROMPT,
    ) -> None:
        super().__init__(done_threshold)
        self.normalize = bool(normalize)
        self.top_logprobs = int(top_logprobs)
        self.prompt = prompt

    def progress_request(self, task: str, frames: Sequence[np.ndarray]) -> Request:
        return self.prompt.format(task=template_safe(task)), list(frames)

    def read_token_probabilities(self, top: Mapping[str, float]) -> float:
        return true_probability(top, normalize=self.normalize)


PRESETS: dict[str, type[JudgePreset]] = {
    "roboreward": RoboRewardPreset,
    "robodopamine": RoboDopaminePreset,
    "topreward": TopRewardPreset,
}


def make_preset(name: str, **options: object) -> JudgePreset:
    """The preset registered as `name`, built with `options` (e.g. `done_threshold`)."""
    try:
        cls = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}") from None
    return cls(**options)
