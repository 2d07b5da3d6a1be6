"""`POST /v1/chat/completions` answers RLinf's API reward worker from a progress backend.

One real server (mock backend, *intensity* rule read on the left half of each frame, a token,
at most 16 frames per request) on 127.0.0.1; requests shaped as RLinf's worker sends them
(`tests.reward.service.routes.rlinf_api_worker`, written from RLinf's published request shape),
answers read with a parser written from RLinf's published trend format.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.reward.service.routes.chat import task_of_prompt
from tests.helpers.svc_helpers import TOKEN, painted
from tests.reward.service.routes.rlinf_api_worker import (
    RLinfShapedClient,
    frame_url,
    parse_trend,
    trend_prompt,
    trend_reward,
)

LEFT_HALF = [0.0, 0.0, 1.0, 0.5]  # the mock reads progress from the left half only


@pytest.fixture(scope="module")
def service() -> Iterator[EmbeddedService]:
    svc = EmbeddedService(
        "mock",
        {"rule": "intensity", "region": LEFT_HALF, "latency_ms": 0},
        token=TOKEN,
        extra_args=["--max-frames", "16", "--max-text-chars", "2000"],
    )
    svc.start()
    yield svc
    svc.stop()


def _client(service: EmbeddedService, **kwargs) -> RLinfShapedClient:
    kwargs.setdefault("token", TOKEN)
    return RLinfShapedClient(f"{service.url}/v1", **kwargs)


def _video(*progress: float) -> list[np.ndarray]:
    return [painted(p) for p in progress]


def test_rlinf_shaped_windows_get_trends_its_parser_reads(service: EmbeddedService) -> None:
    """Two camera views of five frames each, sampling params passed through as RLinf does
    (`views: 2` among them): rising progress on the main view reads positive, falling negative,
    flat unclear; the second view is not scored."""
    client = _client(service, sampling_params={"max_tokens": 16, "temperature": 0.0, "views": 2})
    try:
        third_person = _video(90, 0, 90, 0, 90)
        rising = client.ask([_video(10, 20, 30, 40, 50), third_person], "open the top drawer")
        falling = client.ask([_video(50, 40, 30, 20, 10), third_person], "open the top drawer")
        flat = client.ask([_video(30, 30, 30, 30, 30), third_person], "open the top drawer")
    finally:
        client.close()
    assert [parse_trend(t) for t in (rising, falling, flat)] == ["positive", "negative", "unclear"]
    assert [trend_reward(t) for t in (rising, falling, flat)] == [1.0, -0.2, 0.0]
    # 10 -> 50 covers (50 - 10) / (100 - 10) of what remained: VLAC's accumulation
    assert '"progress": 44.4444' in rising


def test_progress_answer_is_a_plain_number(service: EmbeddedService) -> None:
    client = _client(service, model="progress", sampling_params={"views": 1})
    try:
        text = client.ask([_video(0, 25, 50)], "stack the cups")
    finally:
        client.close()
    assert float(text) == pytest.approx(0.5, abs=1e-6)
    assert parse_trend(text) is None  # not a trend: RLinf's parser would call it invalid


def test_answer_is_an_openai_chat_completion_naming_the_model(service: EmbeddedService) -> None:
    client = _client(service)
    try:
        resp = client.post(client.payload([_video(10, 60)], "Task: wipe the table"))
        caps = client.http.get("/capabilities").json()
    finally:
        client.close()
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    assert answer["model"] == f"mock:{caps['model_id']}"  # which model answered, any name asked
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["system_fingerprint"] == f"mock:{caps['model_id']}@{caps['model_revision']}"


def test_rlinf_libero_frames_are_turned_upright(service: EmbeddedService) -> None:
    """A scene that brightens on its left (upright), as RLinf's LIBERO env emits it (turned
    180°: bright on the right). Told `frame_orientation: rot180` the service turns it back and
    the mock, reading the left half, sees progress; told nothing it sees none."""
    dark = np.zeros((64, 64, 3), np.uint8)
    lit_left = dark.copy()
    lit_left[:, :32] = 200
    emitted = [dark[::-1, ::-1], lit_left[::-1, ::-1]]  # what RLinf's env hands out
    answers = {}
    for orientation in ("rot180", "upright"):
        client = _client(service, sampling_params={"frame_orientation": orientation, "views": 1})
        try:
            answers[orientation] = parse_trend(client.ask([emitted], "turn on the lamp"))
        finally:
            client.close()
    assert answers == {"rot180": "positive", "upright": "unclear"}


def test_task_is_read_from_rlinf_prompts() -> None:
    assert task_of_prompt(trend_prompt("put the bowl on the plate")) == "put the bowl on the plate"
    base = "Task: open the drawer\n\nEvaluate the task and return a reward score between 0 and 1."
    assert task_of_prompt(base) == "open the drawer"
    assert task_of_prompt("  pick up the red cube ") == "pick up the red cube"


def _status(service: EmbeddedService, body: dict, token: str | None = TOKEN) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = httpx.post(f"{service.url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    return resp.status_code, resp.json().get("error", "")


def _body(urls: list[str], text: str = "Task: open the drawer", **extra) -> dict:
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    return {"model": "trend", "messages": [{"role": "user", "content": content}], **extra}


def test_same_token_limits_and_checks_as_every_route(service: EmbeddedService) -> None:
    two = [frame_url(painted(10)), frame_url(painted(20))]
    assert _status(service, _body(two))[0] == 200
    assert _status(service, _body(two), token=None)[0] == 401
    assert _status(service, _body(two), token="wrong")[0] == 401
    status, error = _status(service, _body(two * 9))  # 18 frames, limit 16
    assert status == 413 and "more than the limit of 16" in error
    status, error = _status(service, _body(["http://169.254.169.254/latest/meta-data"]))
    assert status == 422 and "never fetches a URL" in error
    status, error = _status(service, _body(["data:image/png;base64,AAAA"]))
    assert status == 422 and "frames[0]" in error
    status, error = _status(service, _body(two, text="x" * 2001))
    assert status == 422 and "over the limit of 2000" in error
    assert _status(service, {**_body(two), "model": "Qwen3-VL-4B-Instruct"})[0] == 200
    status, error = _status(service, _body(two * 2 + two[:1], views=2))
    assert status == 422 and "do not split into 2 views" in error
    assert _status(service, _body(two, stream=True))[0] == 422
    assert _status(service, _body([]))[0] == 422  # no frames
    assert _status(service, _body(two, text="   "))[0] == 422  # no task
    assert _status(service, {"model": "trend", "messages": []})[0] == 422
