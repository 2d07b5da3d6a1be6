"""RLinf's example reward config against `/v1/chat/completions`, with only its URL changed.

A real server (`mock` backend, rule *intensity*: progress is brightness) on 127.0.0.1, without
a token, as RLinf's worker sends none; the client is built from the example's `reward` block
(`tests.reward.service.routes.rlinf_api_worker.EXAMPLE_REWARD_CONFIG`, written from RLinf's
published config and worker), so it sends RLinf's model name, its sampling params and its
builders' layouts.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted
from tests.reward.service.routes.rlinf_api_worker import (
    EXAMPLE_REWARD_CONFIG,
    RLinfShapedClient,
    parse_trend,
    trend_prompt,
    trend_reward,
)

SCENES = {
    "brightening": (10, 20, 30, 40, 50),
    "constant": (60,) * 5,
    "darkening": (60, 50, 40, 30, 20),
}


@pytest.fixture()
def service(intensity_service: EmbeddedService) -> EmbeddedService:
    """The session's intensity-rule server (tests/conftest.py), without a token as RLinf sends."""
    return intensity_service


def _example_client(service: EmbeddedService, **model_changes) -> RLinfShapedClient:
    reward = copy.deepcopy(EXAMPLE_REWARD_CONFIG)
    reward["api"]["api_base"] = f"{service.url}/v1"  # the one change a user makes
    reward["model"].update(model_changes)
    return RLinfShapedClient.from_reward_config(reward)


def _window(levels: tuple[int, ...]) -> list[np.ndarray]:
    return [painted(level) for level in levels]


@pytest.mark.parametrize("scene", list(SCENES))
def test_example_config_scores_the_three_scenes(service: EmbeddedService, scene: str) -> None:
    """The trend builder's two views (main, then the extra camera: the same scene, brighter),
    `views` unset: brightening positive, constant unclear, darkening negative, rewarded 1.0,
    0.0, -0.2 by the example's parser; the reply's progress stays within -100..100."""
    client = _example_client(service)
    try:
        main = _window(SCENES[scene])
        extra = _window(tuple(min(level + 30, 100) for level in SCENES[scene]))
        text = client.ask([main, extra], "pick up the red cube")
    finally:
        client.close()
    expected = {"brightening": "positive", "constant": "unclear", "darkening": "negative"}[scene]
    assert parse_trend(text) == expected
    assert trend_reward(text) == {"positive": 1.0, "unclear": 0.0, "negative": -0.2}[expected]
    assert -100.0 <= float(text.split('"progress": ')[1].rstrip("}")) <= 100.0


def test_progress_is_clamped(service: EmbeddedService) -> None:
    """60 % -> 20 %: VLAC's accumulation of the critics goes past -100; the reply clamps it."""
    client = _example_client(service)
    try:
        text = client.ask([_window((60, 20, 20, 20, 20)), _window((60,) * 5)], "stack the cups")
    finally:
        client.close()
    assert text.endswith('"progress": -100.0}') and parse_trend(text) == "negative"


def test_one_view_builder_is_told_what_to_set(service: EmbeddedService) -> None:
    """The trend builder with `video_keys: [main_images]` keeps its two-video prompt but sends
    five frames: a 422 naming `views`; with `views: 1` in the sampling params it is read right."""
    client = _example_client(service)
    try:
        resp = client.post(client.payload([_window(SCENES["brightening"])], trend_prompt("x")))
        client.sampling_params["views"] = 1
        text = client.ask([_window(SCENES["brightening"])], "pick up the red cube")
        client.sampling_params["views"] = 1  # contradicts a prompt that matches the images
        wrong = client.post(client.payload([_window((10,) * 5)] * 2, trend_prompt("x")))
    finally:
        client.close()
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert "2 videos of 5 frames (10 images) but the request holds 5" in error
    assert "reward.api.sampling_params.views" in error
    assert parse_trend(text) == "positive"
    assert wrong.status_code == 422 and "set views: 2 or drop it" in wrong.json()["error"]


def test_base_vlm_builder_prompt(service: EmbeddedService) -> None:
    """The base VLM builder's shape (one image per image key, its `Task:` prompt): one frame
    is no window, so no progress: unclear, or 0.0 as a number."""
    client = _example_client(service)
    try:
        text = client.ask_base([painted(40)], "open the drawer")
        client.sampling_params["answer"] = "progress"
        number = client.ask_base([painted(40)], "open the drawer")
    finally:
        client.close()
    assert parse_trend(text) == "unclear" and float(number) == 0.0


def test_model_name_from_model_path_and_ignored_fields(service: EmbeddedService) -> None:
    """Without `api.model` RLinf sends the last part of `model_path`; any name is answered,
    and sampling fields change nothing."""
    reward = copy.deepcopy(EXAMPLE_REWARD_CONFIG)
    reward["api"] = {"api_base": service.url, "sampling_params": {"top_p": 0.1, "n": 3}}
    client = RLinfShapedClient.from_reward_config(reward)
    try:
        assert client.model == "Qwen3-VL-4B-Instruct"
        resp = client.post(client.payload([_window((10, 40))], "Task: open the drawer"))
    finally:
        client.close()
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"].startswith("mock:")
    assert parse_trend(client.text_of(resp.json())) == "positive"


def test_frames_per_view_states_the_views(service: EmbeddedService) -> None:
    """`frames_per_view` (RLinf's `history_size`) says how the images split, whatever the prompt
    says; one that does not divide them, or disagrees with `views`, is a 422."""
    client = _example_client(service)
    rising, flat = _window(SCENES["brightening"]), _window(SCENES["constant"])
    try:
        client.sampling_params["frames_per_view"] = 5
        one_view = client.ask([rising], "pick up the red cube")
        three_views = client.ask([rising, flat, flat], "pick up the red cube")
        client.sampling_params["frames_per_view"] = 3
        uneven = client.post(client.payload([rising], "Task: pick up the red cube"))
        client.sampling_params.update(frames_per_view=5, views=2)
        clash = client.post(client.payload([rising], "Task: pick up the red cube"))
    finally:
        client.close()
    assert parse_trend(one_view) == parse_trend(three_views) == "positive"
    assert uneven.status_code == 422 and "not whole runs of 3 frames" in uneven.json()["error"]
    assert clash.status_code == 422 and "set one of them" in clash.json()["error"]
