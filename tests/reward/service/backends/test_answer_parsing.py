"""Answer parsing on a table of real-looking model outputs."""

from __future__ import annotations

import pytest

from evolve_envs.reward.service.backends.answer_parsing import (
    answer_text,
    parse_critic,
    parse_score,
    strip_think,
)

# (model output, auto score, percentage score, unit score)
SCORES = [
    ("<answer>85</answer>", 0.85, 0.85, 1.0),
    (
        "<think>\nThe bowl is on the plate; the gripper let go.\n</think>\n<answer>92</answer>",
        0.92,
        0.92,
        1.0,
    ),
    ("<think>Step 1 of 3 done, maybe 33%</think><answer>0.4</answer>", 0.4, 0.004, 0.4),
    ("The robot completed the task. Score: 7/10", 0.7, 0.7, 0.7),
    ("Final answer: 65%", 0.65, 0.65, 1.0),
    ("I would rate this episode 3 out of 10... actually 0.25", 0.25, 0.0025, 0.25),
    ("<answer> 1 </answer>", 1.0, 0.01, 1.0),
    ("<answer>0</answer>", 0.0, 0.0, 0.0),
    ("Score: 120", 1.0, 1.0, 1.0),
    ("<answer>-5</answer>", 0.0, 0.0, 0.0),
    ("<answer>100</answer> (I considered 40 earlier)", 1.0, 1.0, 1.0),
    ("<ANSWER>55</ANSWER>", 0.55, 0.55, 1.0),
    ("<think>drawer at 30% then 60%</think> The drawer is fully open. <answer>98", 0.98, 0.98, 1.0),
    ("<answer>first try 20</answer><answer>second 45</answer>", 0.45, 0.45, 1.0),
    ("Success probability: .75", 0.75, 0.0075, 0.75),
    ("score=8.5e1", 0.85, 0.85, 1.0),
]

UNPARSABLE = [
    "",
    "I cannot tell from these frames.",
    "<think>maybe 80 or 90</think>",
    "<think>unfinished reasoning with 70 in it",
    "<answer>unclear</answer>",
    "ratio 3/0",
]

CRITICS = [
    ("<answer>35</answer>", 35.0),
    ("<think>the lid moved closer, about 20 percent</think><answer>+15</answer>", 15.0),
    ("Image-2 is further from the goal: -40", -40.0),
    ("<answer>-250</answer>", -100.0),
    ("<answer>180</answer>", 100.0),
    ("Progress: +35%", 35.0),
    ("Relative progress 3/10", 30.0),
    ("<answer>0</answer>", 0.0),
]


@pytest.mark.parametrize(("text", "auto", "percentage", "unit"), SCORES)
def test_score_modes(text: str, auto: float, percentage: float, unit: float) -> None:
    assert parse_score(text, "auto") == pytest.approx(auto)
    assert parse_score(text, "percentage") == pytest.approx(percentage)
    assert parse_score(text, "unit") == pytest.approx(unit)


@pytest.mark.parametrize("text", UNPARSABLE)
def test_unparsable_answers_give_none(text: str) -> None:
    assert parse_score(text) is None
    assert parse_critic(text) is None


@pytest.mark.parametrize(("text", "critic"), CRITICS)
def test_critics_are_clamped(text: str, critic: float) -> None:
    assert parse_critic(text) == pytest.approx(critic)


def test_think_and_answer_extraction() -> None:
    assert strip_think("<think>a 1</think>b 2").strip() == "b 2"
    assert strip_think("reasoning 5</think> final 6").strip() == "final 6"
    assert answer_text("<think>x</think> <answer> 42 </answer>") == "42"
    assert answer_text("no tags 7") == "no tags 7"


def test_unknown_score_mode() -> None:
    with pytest.raises(ValueError, match="score_mode"):
        parse_score("5", "decimal")
