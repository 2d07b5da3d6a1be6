"""Turn a vision-language model's free-text answer into a number (rules in docs/reward-models.md,
"How the backends answer"); no number parses to None.

Example:
    >>> parse_score("<think>the cup is placed</think><answer>85</answer>")
    0.85
    >>> parse_critic("Progress: +35%")
    35.0
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "SCORE_MODES",
    "ParsedNumber",
    "strip_think",
    "answer_text",
    "last_number",
    "parse_score",
    "parse_critic",
]

SCORE_MODES = ("auto", "percentage", "unit")

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(
    r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"(?:\s*(?P<pct>%)|\s*/\s*(?P<den>\d+(?:\.\d+)?))?"
)


@dataclass(frozen=True)
class ParsedNumber:
    """A number found in an answer: its value and how it was written."""

    value: float
    percent: bool = False
    ratio: bool = False


def strip_think(text: str) -> str:
    """Remove reasoning blocks: `<think>...</think>`, and a `<think>` that never closes."""
    text = _THINK_BLOCK.sub(" ", text)
    if "</think>" in text.lower():  # a closing tag without its opening one: keep what follows
        text = re.split(r"</think>", text, flags=re.IGNORECASE)[-1]
    return _THINK_OPEN.sub(" ", text)


def answer_text(text: str) -> str:
    """The content of the last `<answer>` tag after dropping reasoning, else the whole text."""
    text = strip_think(text)
    answers = _ANSWER.findall(text)
    for candidate in reversed(answers):
        if candidate.strip():
            return candidate.strip()
    return text.strip()


def last_number(text: str) -> ParsedNumber | None:
    """The last finite number in `answer_text(text)`, or None."""
    found = None
    for match in _NUMBER.finditer(answer_text(text)):
        try:
            value = float(match.group("num"))
        except ValueError:
            continue
        den = match.group("den")
        if den is not None:
            denominator = float(den)
            if denominator == 0:
                continue
            candidate = ParsedNumber(value / denominator, ratio=True)
        else:
            candidate = ParsedNumber(value, percent=match.group("pct") is not None)
        if math.isfinite(candidate.value):
            found = candidate
    return found


def _clamp(value: float, lo: float, hi: float) -> float:
    return float(min(hi, max(lo, value)))


def parse_score(text: str, mode: str = "auto") -> float | None:
    """A score in [0, 1] from an answer (see module docs), or None if there is no number."""
    if mode not in SCORE_MODES:
        raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {mode!r}")
    number = last_number(text)
    if number is None:
        return None
    value = number.value
    if number.ratio:
        pass
    elif mode == "percentage":
        value = value / 100.0
    elif mode == "auto" and (number.percent or value > 1.0):
        value = value / 100.0
    return _clamp(value, 0.0, 1.0)


def parse_critic(text: str) -> float | None:
    """A pairwise critic in [-100, 100] from an answer, or None if there is no number.

    A ratio (`3/10`) is read as a fraction of 100.
    """
    number = last_number(text)
    if number is None:
        return None
    value = number.value * 100.0 if number.ratio else number.value
    return _clamp(value, -100.0, 100.0)
