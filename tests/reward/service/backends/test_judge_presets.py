"""The judge presets' strict answer readers and prompts (no model, no server)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evolve_envs.reward.service.backends.base import CriticItem, DoneItem, MalformedAnswerError
from evolve_envs.reward.service.backends.judge_presets import (
    RoboDopaminePreset,
    RoboRewardPreset,
    TopRewardPreset,
    make_preset,
    true_probability,
)
from evolve_envs.reward.service.backends.judge_runner import PresetJudge

FRAME = np.zeros((8, 8, 3), np.uint8)


@pytest.mark.parametrize(
    ("answer", "progress"),
    [
        ("ANSWER: 1", 0.0),
        ("ANSWER: 2", 0.25),
        ("ANSWER: 3", 0.5),
        ("The cup is almost on the plate.\nANSWER: 4", 0.75),
        ("answer:5.", 1.0),
        ("<think>ANSWER: 1 looks wrong</think>ANSWER: 5", 1.0),
    ],
)
def test_roboreward_reads_one_score_in_1_to_5(answer: str, progress: float) -> None:
    assert RoboRewardPreset().read_progress(answer) == progress


@pytest.mark.parametrize(
    "answer",
    ["", "4", "ANSWER: 0", "ANSWER: 6", "ANSWER: 3.5", "ANSWER: four", "ANSWER: 2 ANSWER: 3"],
)
def test_roboreward_refuses_malformed_answers(answer: str) -> None:
    with pytest.raises(MalformedAnswerError, match="roboreward"):
        RoboRewardPreset().read_progress(answer)


def test_roboreward_done_only_at_five() -> None:
    preset = make_preset("roboreward")
    assert [preset.is_done((n - 1) / 4) for n in range(1, 6)] == [False] * 4 + [True]
    text, images = preset.progress_request("open the drawer", [FRAME, FRAME])
    assert text.endswith("Task: open the drawer") and "ANSWER: <score>" in text
    assert len(images) == 2


@pytest.mark.parametrize(
    ("answer", "hop"),
    [("<score>+35%</score>", 35.0), ("<score>-100%</score>", -100.0), ("<score>0%</score>", 0.0)],
)
def test_robodopamine_reads_one_hop(answer: str, hop: float) -> None:
    preset = RoboDopaminePreset()
    assert preset.read_critic(answer) == hop
    assert preset.read_progress(answer) == max(0.0, hop / 100)


@pytest.mark.parametrize(
    "answer", ["35%", "<score>+135%</score>", "<score>+3.5%</score>", "<score>1</score>", ""]
)
def test_robodopamine_refuses_malformed_answers(answer: str) -> None:
    with pytest.raises(MalformedAnswerError, match="robodopamine"):
        RoboDopaminePreset().read_critic(answer)


def test_robodopamine_prompt_places_each_image() -> None:
    preset = RoboDopaminePreset()
    a, b, first, end = (np.full((4, 4, 3), v, np.uint8) for v in (1, 2, 3, 4))
    text, images = preset.critic_request(CriticItem("t", a, b, first, reference=(end,)))
    assert text.count("<image>") == len(images) == 4
    assert [int(im[0, 0, 0]) for im in images] == [3, 4, 1, 2]  # START, END, BEFORE, AFTER
    text, images = preset.critic_request(CriticItem("t", a, b, first))
    assert text.count("<image>") == len(images) == 3 and "REFERENCE END" not in text


def test_true_probability_sums_variants_and_refuses_off_topic_tokens() -> None:
    assert true_probability({" True": 0.5, "true": 0.2, "False": 0.1}) == pytest.approx(0.7)
    assert TopRewardPreset(normalize=True).read_token_probabilities(
        {"True": 0.3, "False": 0.1}
    ) == pytest.approx(0.75)
    with pytest.raises(MalformedAnswerError, match="topreward"):
        true_probability({"Yes": 0.9, "No": 0.1})


def test_judge_fails_only_the_malformed_item_and_counts_it() -> None:
    class Canned:
        def generate(self, requests, max_new_tokens):
            return ["ANSWER: 4", "garbage", "ANSWER: 2"][: len(requests)]

    judge = PresetJudge(make_preset("roboreward"))
    items = [DoneItem("t", FRAME, FRAME, FRAME)] * 3
    out = judge.done_batch(Canned(), items)
    assert out[0] == (False, 0.75) and out[2] == (False, 0.25)
    assert isinstance(out[1], MalformedAnswerError) and judge.malformed_answers == 1


def test_critic_from_two_progress_answers() -> None:
    class Canned:
        def token_probabilities(self, requests, top_k):
            return [{"True": 0.2, "False": 0.8}, {"True": 0.6, "False": 0.4}]

    judge = PresetJudge(make_preset("topreward"))
    (critic,) = judge.critic_batch(Canned(), [CriticItem("t", FRAME, FRAME, FRAME)])
    assert math.isclose(critic, 100 * (60 - 20) / (100 - 20))  # critic_between(20, 60)
