"""What RLinf's API reward worker sends and how it reads the answer, written from its published
shape (RLinf ``main``: ``rlinf/workers/reward/api_reward_worker.py``, the trend input builder in
``rlinf/models/embodiment/reward/vlm_reward_utils/input_builder.py`` and the trend parser in
``.../reward_parser.py``; RLinf's docs, "Reward model", section "SGLang API Inference").

* Request, per env whose window is full: ``POST <api_base without /v1>/v1/chat/completions``
  with ``{"model": name, "messages": [{"role": "user", "content": parts}],
  **reward.api.sampling_params}``; ``name`` is ``reward.api.model``, else the last part of
  ``reward.model.model_path``; ``parts`` is every frame of every camera view, view after
  view, as ``{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,..."}}`` (JPEG,
  quality 95), then one ``{"type": "text", "text": prompt}``. No ``Authorization`` header.
* Input builders (``reward.model.input_builder_name``): the trend builder
  (``vlm_trend_reward_input_builder``) sends one video per entry of its ``video_keys`` (default
  ``main_images`` then ``extra_view_images``, each the history window) and a fixed prompt that
  names the task: ``You are currently performing the task: <task>. You are given two
  synchronized 5-frame videos ... Answer with exactly one word: positive, negative, or
  unclear.`` (whatever ``video_keys`` holds). The base VLM builder's prompt is ``Task: <task>``
  then ``Evaluate the task and return a reward score between 0 and 1.``, with one image per
  entry of its ``image_keys``.
* Answer text: ``choices[0].message.content`` (a string, or a list of parts whose ``text`` are
  joined; no choices: empty).
* Trend parser: the text as a JSON object (else the span from its first ``{`` to its last ``}``)
  whose ``"trend"`` is positive / negative / unclear; else the last of those words in the text;
  else invalid. Rewards by label (RLinf's example values): positive 1.0, negative -0.2, unclear
  0.0, invalid 0.0.

Example:
    >>> parse_trend('{"trend": "positive", "progress": 12.0}'), parse_trend("it is NEGATIVE")
    ('positive', 'negative')
    >>> trend_reward("no idea")
    0.0
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
from PIL import Image

__all__ = [
    "EXAMPLE_REWARD_CONFIG",
    "RLinfShapedClient",
    "base_prompt",
    "frame_url",
    "parse_trend",
    "trend_prompt",
    "trend_reward",
]

#: The ``reward`` block of RLinf's example config
#: (``examples/embodiment/config/maniskill_ppo_mlp_vlm_trend_reward_sglang.yaml``), the parts
#: its API reward worker reads; ``api.api_base`` is the one field a user fills in.
EXAMPLE_REWARD_CONFIG: dict[str, Any] = {
    "worker_type": "api",
    "api": {
        "api_base": None,
        "model": "Qwen3-VL-4B-Instruct",
        "sampling_params": {"max_tokens": 16, "temperature": 0.0},
    },
    "model": {
        "model_path": "/path/to/Qwen3-VL-4B-Instruct",
        "model_type": "buffered_vlm",
        "input_builder_name": "vlm_trend_reward_input_builder",
        "input_builder_params": {
            "default_task_description": "Pick up the red cube and place it on the green spot "
            "on the table."
        },
        "reward_parser_name": "vlm_trend_reward_parser",
        "reward_parser_params": {
            "positive_reward": 1.0,
            "negative_reward": -0.2,
            "unclear_reward": 0.0,
            "invalid_reward": 0.0,
        },
        "history_buffers": {
            "history_window": {
                "history_size": 5,
                "min_history_size": 5,
                "history_keys": ["main_images", "extra_view_images"],
            }
        },
    },
}

REWARDS = {"positive": 1.0, "negative": -0.2, "unclear": 0.0}
INVALID_REWARD = 0.0


def frame_url(frame: np.ndarray) -> str:
    """A ``uint8`` H x W x 3 frame as RLinf sends it: a JPEG (quality 95) data URL."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame[..., :3]), mode="RGB").save(buf, "JPEG", quality=95)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def trend_prompt(task: str) -> str:
    return (
        f"You are currently performing the task: {task}. You are given two synchronized 5-frame "
        "videos from different camera views (main view and third-person view) of the same robot "
        "action window. Judge whether the action trend is positive, negative, or unclear. Answer "
        "with exactly one word: positive, negative, or unclear."
    )


def base_prompt(task: str) -> str:
    return f"Task: {task}\n\nEvaluate the task and return a reward score between 0 and 1."


def _json_object(text: str) -> dict[str, Any] | None:
    for candidate in (text.strip(), text[text.find("{") : text.rfind("}") + 1]):
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_trend(text: str) -> str | None:
    """The trend label in an answer text (RLinf's published format), or None (invalid)."""
    obj = _json_object(text)
    if obj is not None:
        label = str(obj.get("trend", "")).strip().lower()
        if label in REWARDS:
            return label
    words = re.findall(r"\b(positive|negative|unclear)\b", text.strip().lower())
    return words[-1] if words else None


def trend_reward(text: str) -> float:
    label = parse_trend(text)
    return REWARDS[label] if label is not None else INVALID_REWARD


class RLinfShapedClient:
    """Sends windows of frames as RLinf's API reward worker does (see the module docstring).

    ``token`` adds a bearer header, which RLinf's worker does not send (for the token checks).
    """

    def __init__(
        self,
        api_base: str,
        model: str = "Qwen3-VL-4B-Instruct",
        sampling_params: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        base = api_base.rstrip("/")
        self.base_url = base[:-3] if base.endswith("/v1") else base
        self.model = model
        self.sampling_params = dict(sampling_params or {})
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=60, trust_env=False
        )

    @classmethod
    def from_reward_config(cls, reward: dict[str, Any]) -> RLinfShapedClient:
        """The client RLinf's worker builds from a ``reward`` block (``EXAMPLE_REWARD_CONFIG``)."""
        api, model = reward.get("api") or {}, reward["model"]
        if not api.get("api_base"):
            raise ValueError("reward.api.api_base must be set for API reward inference.")
        name = api.get("model") or str(model["model_path"]).rstrip("/").split("/")[-1]
        return cls(api["api_base"], model=name, sampling_params=api.get("sampling_params"))

    def payload(self, videos: Sequence[Sequence[np.ndarray]], prompt: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": frame_url(frame)}}
            for video in videos
            for frame in video
        ]
        content.append({"type": "text", "text": prompt})
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            **self.sampling_params,
        }

    def post(self, payload: dict[str, Any]) -> httpx.Response:
        return self.http.post("/v1/chat/completions", json=payload)

    @staticmethod
    def text_of(answer: dict[str, Any]) -> str:
        choices = answer.get("choices") or []
        if not choices:
            return ""
        content = (choices[0].get("message") or {}).get("content", "")
        if isinstance(content, list):
            return "".join(str(part.get("text", "")) for part in content)
        return str(content)

    def ask(self, videos: Sequence[Sequence[np.ndarray]], task: str) -> str:
        """One env's window as the trend builder sends it, one video per entry of its
        ``video_keys``: the answer text (raises on an HTTP error status)."""
        resp = self.post(self.payload(videos, trend_prompt(task)))
        resp.raise_for_status()
        return self.text_of(resp.json())

    def ask_base(self, images: Sequence[np.ndarray], task: str) -> str:
        """The base VLM builder's request: one image per image key, its ``Task:`` prompt."""
        resp = self.post(self.payload([images], base_prompt(task)))
        resp.raise_for_status()
        return self.text_of(resp.json())

    def close(self) -> None:
        self.http.close()
