"""OpenAI-compatible `POST /v1/chat/completions` answered by any progress backend, for RLinf's API
reward worker (docs/PROTOCOLS.md, section 4).

Example:
    >>> [route.path for route in router.routes]
    ['/v1/chat/completions']
    >>> task_of_prompt("You are currently performing the task: open the drawer. You are given")
    'open the drawer'
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from evolve_envs.reward.protocol.critic_math import value_list
from evolve_envs.reward.service.backends.base import CriticItem
from evolve_envs.reward.service.errors import ApiError
from evolve_envs.reward.service.routes.json_budget import (
    BudgetedJSONRoute,
    json_body_doc,
    parse_json_model,
)
from evolve_envs.reward.service.state.service_state import ServiceState, State

__all__ = ["ChatRequest", "ChatResponse", "prompt_layout", "router", "task_of_prompt", "trend_of"]

router = APIRouter(tags=["chat"], route_class=BudgetedJSONRoute)

#: The answers this route gives (the request's `answer`, else `progress` when `model` says so).
ANSWERS = ("trend", "progress")
#: The range of the reply's `progress` (percent).
PROGRESS_RANGE = (-100.0, 100.0)
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_LAYOUT = re.compile(
    r"\b(one|two|three|four|five|six|\d+)\s+synchronized\s+(\d+)-frame\s+videos?\b", re.I
)  # RLinf's trend prompt: "two synchronized 5-frame videos"
_TASK_PATTERNS = (
    re.compile(r"performing the task:\s*(.+?)\.?\s+You are given", re.S),  # RLinf's trend prompt
    re.compile(r"^\s*Task:\s*(.+?)\s*$", re.M),  # RLinf's base VLM prompt
)


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ImageURL(_Loose):
    """An `image_url` part's target: a `data:image/...;base64,` URL."""

    url: str
    detail: str | None = None


class ImagePart(_Loose):
    type: Literal["image_url"]
    image_url: ImageURL


class TextPart(_Loose):
    type: Literal["text"]
    text: str


Part = Annotated[ImagePart | TextPart, Field(discriminator="type")]


class ChatMessage(_Loose):
    role: str
    content: str | Annotated[list[Part], Field(fail_fast=True)] | None = None


class ChatRequest(_Loose):
    """The fields of an OpenAI chat request this route reads (others are ignored).

    >>> req = ChatRequest.model_validate({"model": "Qwen3-VL-4B-Instruct", "messages": [
    ...     {"role": "user", "content": "Task: stack the cups"}], "temperature": 0})
    >>> req.views is None, req.answer is None  # views: from the prompt's layout, else 1
    (True, True)
    """

    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, fail_fast=True)
    stream: bool = False
    answer: Literal["trend", "progress"] | None = None
    views: int | None = Field(default=None, ge=1, le=16)
    frames_per_view: int | None = Field(default=None, ge=1)
    frame_orientation: Literal["upright", "rot180", "raw"] = "upright"
    trend_threshold: float = Field(default=1.0, ge=0.0, le=100.0)


class AnswerMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AnswerMessage
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatResponse(BaseModel):
    """A chat completion (OpenAI's `chat.completion` object); `model` names the backend and its
    model that answered (`<backend>:<model_id>`), `system_fingerprint` adds the revision."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage = Field(default_factory=Usage)


def task_of_prompt(text: str) -> str:
    """The task in a reward prompt: RLinf's trend or base prompt's, else the whole text."""
    for pattern in _TASK_PATTERNS:
        match = pattern.search(text)
        if match and match.group(1).strip():
            return match.group(1).strip()
    return text.strip()


def prompt_layout(text: str) -> tuple[int, int] | None:
    """The (views, frames per view) a prompt states ("two synchronized 5-frame videos"), or None.

    >>> prompt_layout("Task: stack the cups") is None
    True
    """
    match = _LAYOUT.search(text)
    if match is None:
        return None
    count = match.group(1).lower()
    return _NUMBER_WORDS.get(count) or int(count), int(match.group(2))


def _stated_views(req: ChatRequest, images: int) -> int | None:
    """The views the request states: `views`, or the images over `frames_per_view`."""
    per_view = req.frames_per_view
    if per_view is None:
        return req.views
    if images % per_view:
        raise ApiError(
            422, f"frames_per_view: {images} images are not whole runs of {per_view} frames"
        )
    if req.views is not None and req.views * per_view != images:
        raise ApiError(
            422,
            f"views: {req.views} views of frames_per_view: {per_view} frames are not the "
            f"{images} images sent; set one of them",
        )
    return images // per_view


def views_of(req: ChatRequest, images: int, text: str) -> int:
    """How many camera views the request's images hold: its `views` (or the images over its
    `frames_per_view`), else the layout its prompt states, else 1. Raises ApiError (422, saying
    what to set) when they cannot all be right."""
    layout = prompt_layout(text)
    stated = layout is not None and layout[0] * layout[1] == images
    hint = "set `views` (RLinf: reward.api.sampling_params.views) to the number of camera views"
    views = _stated_views(req, images)
    if views is not None:
        if images % views:
            raise ApiError(422, f"views: {images} images do not split into {views} views; {hint}")
        if stated and layout is not None and layout[0] != views:
            raise ApiError(
                422,
                f"views: {views}, but the prompt describes {layout[0]} videos of "
                f"{layout[1]} frames, which is what the {images} images hold; set views: "
                f"{layout[0]} or drop it",
            )
        return views
    if layout is None:
        return 1
    if not stated:
        raise ApiError(
            422,
            f"views: the prompt describes {layout[0]} videos of {layout[1]} frames "
            f"({layout[0] * layout[1]} images) but the request holds {images}; {hint} "
            f"(RLinf's trend builder sends one video per entry of video_keys)",
        )
    return layout[0]


def trend_of(progress: float, threshold: float) -> str:
    """`positive` / `negative` / `unclear` for a window's progress (percent).

    >>> trend_of(25.0, 1.0), trend_of(-3.0, 1.0), trend_of(0.5, 1.0)
    ('positive', 'negative', 'unclear')
    """
    if progress >= threshold and progress > 0:
        return "positive"
    if progress <= -threshold and progress < 0:
        return "negative"
    return "unclear"


def _frames_and_text(req: ChatRequest) -> tuple[list[str], str]:
    """The user messages' image URLs (checked to be data URLs) and their text, in order."""
    urls: list[str] = []
    texts: list[str] = []
    for message in req.messages:
        if message.role != "user" or message.content is None:
            continue
        parts = (
            [TextPart(type="text", text=message.content)]
            if isinstance(message.content, str)
            else message.content
        )
        for part in parts:
            if isinstance(part, TextPart):
                texts.append(part.text)
                continue
            url = part.image_url.url
            head = url[:64].lower()
            if not (head.startswith("data:image/") and ";base64," in url[:128].lower()):
                raise ApiError(
                    422,
                    f"messages: image {len(urls)} is not a data:image/...;base64, URL; the "
                    "service reads base64 JPEG/PNG data URLs and never fetches a URL",
                )
            urls.append(url)
    return urls, "\n".join(texts)


async def _window_progress(
    state: ServiceState, request: Request, task: str, frames: list[np.ndarray]
) -> float:
    """The progress (percent) over `frames`: the backend's critics between consecutive frames,
    accumulated from the first (VLAC's `critic_to_value_simple`)."""
    first = frames[0]

    async def make_chunk(lo: int, hi: int) -> list[CriticItem]:
        return [CriticItem(task, frames[i], frames[i + 1], first) for i in range(lo, hi)]

    critics = await state.run_in_chunks("critic", len(frames) - 1, make_chunk, request)
    return float(value_list([float(c) for c in critics])[-1])


def _fingerprint(state: ServiceState) -> str:
    model_id, revision = state.backend.model_identity()
    return f"{state.backend.name}:{model_id or 'unknown'}@{revision or 'unknown'}"


def _answering_model(state: ServiceState) -> str:
    return f"{state.backend.name}:{state.backend.model_identity()[0] or 'unknown'}"


@router.post(
    "/v1/chat/completions",
    response_model=ChatResponse,
    openapi_extra=json_body_doc(ChatRequest),
)
async def chat_completions(request: Request, state: State) -> ChatResponse:
    """Progress over the window of frames in the messages, as a trend or a number (module docs)."""
    req = await parse_json_model(request, ChatRequest)
    answer = req.answer or ("progress" if req.model == "progress" else "trend")
    if req.stream:
        raise ApiError(422, "stream: streamed answers are not served; send stream: false")
    urls, text = _frames_and_text(req)
    state.check_text("prompt", text)
    task = task_of_prompt(text)
    if not task:
        raise ApiError(422, "messages: no task text in the user messages")
    state.check_count("frames", urls)
    window = len(urls) // views_of(req, len(urls), text) if urls else 0
    if window == 0:
        raise ApiError(422, "messages: no image_url parts: send the window's frames as images")
    frames = await state.decode(urls, "frames", state.pixel_budget(), keep=range(window))
    if req.frame_orientation != "upright":
        cols = slice(None, None, -1) if req.frame_orientation == "rot180" else slice(None)
        rows = slice(None, None, -1) if req.frame_orientation == "raw" else slice(None)
        frames = [np.ascontiguousarray(f[rows, cols]) for f in frames]
    progress = await _window_progress(state, request, task, frames) if window > 1 else 0.0
    progress = min(max(progress, PROGRESS_RANGE[0]), PROGRESS_RANGE[1])
    if answer == "trend":
        label = trend_of(progress, req.trend_threshold)
        content = json.dumps({"trend": label, "progress": round(progress, 4)})
    else:
        content = repr(round(progress / 100.0, 6))
    return ChatResponse(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=_answering_model(state),
        system_fingerprint=_fingerprint(state),
        choices=[Choice(message=AnswerMessage(content=content))],
    )
