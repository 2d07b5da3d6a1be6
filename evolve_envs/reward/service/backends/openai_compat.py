"""OpenAICompatBackend: the VLM judge on any OpenAI-compatible `/v1/chat/completions` server (vLLM,
SGLang, TGI, hosted APIs), with the `vlm` backend's prompts and parsing.

Example:
    >>> backend = OpenAICompatBackend("http://gpu:8000/v1", model="qwen")  # doctest: +SKIP
    >>> backend.capabilities().video  # doctest: +SKIP
    True
"""

from __future__ import annotations

import base64
import io
import math
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from evolve_envs.reward.service.backends.answer_parsing import SCORE_MODES
from evolve_envs.reward.service.backends.base import Backend, BackendError
from evolve_envs.reward.service.backends.vlm import VLMBackend
from evolve_envs.reward.service.backends.vlm_judge import (
    DEFAULT_PROMPTS,
    DEFAULT_SYSTEM_PROMPT,
    IMAGE_MARK,
)

__all__ = ["OpenAICompatBackend", "frame_data_url"]


def frame_data_url(frame: np.ndarray, quality: int = 90) -> str:
    """`data:image/jpeg;base64,...` of an RGB uint8 frame."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buf, "JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class OpenAICompatBackend(VLMBackend):
    """Reward judgements from a VLM behind an OpenAI-compatible server (see module docs).

    Args:
        base_url: the server's API root, e.g. `http://127.0.0.1:8000/v1`.
        model: the model name the server knows.
        api_key: bearer key (default `$OPENAI_API_KEY`, else "EMPTY").
        timeout: seconds per request attempt.
        max_retries: retries per request.
        max_concurrency: most requests in flight at once.
        jpeg_quality: quality of the frames sent.
        max_new_tokens, video_max_new_tokens, score_mode, temperature, done_threshold,
        fallback_critic, fallback_score, system_prompt, *_prompt: as for the `vlm` backend.
        extra_body: extra JSON fields of every request (e.g. vLLM's `top_k`).
        stream: ask for a streamed answer and join its chunks (every server supports it;
            `transformers serve` answers only that way); False: one JSON answer.
        preset, preset_options: a judge preset and its options, as for the `vlm` backend
            (`topreward` reads `logprobs`/`top_logprobs` of a one-token answer).
        disabled: optional capabilities to switch off.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        jpeg_quality: int = 90,
        max_new_tokens: int = 32,
        video_max_new_tokens: int = 256,
        caller_max_new_tokens: int = 1024,
        score_mode: str = "auto",
        temperature: float = 0.0,
        done_threshold: float = 95.0,
        fallback_critic: float = 0.0,
        fallback_score: float = 0.0,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        pairwise_prompt: str = DEFAULT_PROMPTS["pairwise_prompt"],
        progress_prompt: str = DEFAULT_PROMPTS["progress_prompt"],
        video_prompt: str = DEFAULT_PROMPTS["video_prompt"],
        image_prompt: str = DEFAULT_PROMPTS["image_prompt"],
        extra_body: dict[str, object] | None = None,
        stream: bool = True,
        preset: str | None = None,
        preset_options: dict[str, object] | None = None,
        disabled: Iterable[str] = (),
    ) -> None:
        Backend.__init__(self, disabled=disabled)  # no local model: VLMBackend's loader is skipped
        if score_mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {score_mode!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        try:
            import openai
        except ImportError as exc:
            raise BackendError(
                f"the openai backend needs the 'openai' package (pip install openai): {exc}"
            ) from exc
        self.base_url = base_url
        self.model = model
        self.jpeg_quality = int(jpeg_quality)
        self._set_judge_options(
            max_new_tokens=max_new_tokens,
            video_max_new_tokens=video_max_new_tokens,
            caller_max_new_tokens=caller_max_new_tokens,
            score_mode=score_mode,
            temperature=temperature,
            done_threshold=done_threshold,
            fallback_critic=fallback_critic,
            fallback_score=fallback_score,
            system_prompt=system_prompt,
            prompts={
                "pairwise": pairwise_prompt,
                "progress": progress_prompt,
                "video": video_prompt,
                "image": image_prompt,
            },
        )
        self.extra_body = dict(extra_body or {})
        self.stream = bool(stream)
        self.unparsable_answers = 0
        self._set_preset(preset, preset_options)
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=float(timeout),
            max_retries=int(max_retries),
        )
        self._pool = ThreadPoolExecutor(max_workers=int(max_concurrency), thread_name_prefix="oai")

    def model_identity(self) -> tuple[str | None, str | None]:
        """The served model's name; its revision is unknown to the protocol (None)."""
        return self.model, None

    def _messages(self, text: str, images: Sequence[np.ndarray]) -> list[dict[str, object]]:
        parts = [
            {"type": "image_url", "image_url": {"url": frame_data_url(f, self.jpeg_quality)}}
            for f in images
        ]
        content: list[dict[str, object]] = []
        if images and text.count(IMAGE_MARK) == len(images):  # each image at its mark
            pieces = text.split(IMAGE_MARK)
            for piece, part in zip(pieces, parts, strict=False):
                if piece:
                    content.append({"type": "text", "text": piece})
                content.append(part)
            if pieces[-1]:
                content.append({"type": "text", "text": pieces[-1]})
        else:
            content = [*parts, {"type": "text", "text": text}]
        messages: list[dict[str, object]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": content})
        return messages

    def _ask(self, text: str, images: Sequence[np.ndarray], max_new_tokens: int) -> str:
        try:
            resp = self._client.chat.completions.create(
                model=self.model,
                messages=self._messages(text, images),
                max_tokens=max_new_tokens,
                temperature=self.temperature,
                extra_body=self.extra_body or None,
                stream=self.stream,
            )
            if self.stream:
                return "".join(c.choices[0].delta.content or "" for c in resp if c.choices)
        except self._openai.OpenAIError as exc:
            raise BackendError(f"chat completion at {self.base_url} failed: {exc}") from exc
        if not resp.choices:
            raise BackendError(f"chat completion at {self.base_url} returned no choices")
        return resp.choices[0].message.content or ""

    def _ask_top_tokens(self, text: str, images: Sequence[np.ndarray], top_k: int) -> dict:
        try:
            resp = self._client.chat.completions.create(
                model=self.model,
                messages=self._messages(text, images),
                max_tokens=1,
                temperature=0.0,
                logprobs=True,
                top_logprobs=int(top_k),
                extra_body=self.extra_body or None,
                stream=False,
            )
        except self._openai.OpenAIError as exc:
            raise BackendError(f"chat completion at {self.base_url} failed: {exc}") from exc
        choice = resp.choices[0] if resp.choices else None
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if not content:
            raise BackendError(
                f"chat completion at {self.base_url} returned no logprobs (does the server "
                "support logprobs/top_logprobs?)"
            )
        table: dict[str, float] = {}
        for alt in content[0].top_logprobs or []:
            table[alt.token] = table.get(alt.token, 0.0) + math.exp(alt.logprob)
        if not table:  # no alternatives given: the chosen token alone
            table[content[0].token] = math.exp(content[0].logprob)
        return table

    def token_probabilities(
        self, requests: Sequence[tuple[str, Sequence[np.ndarray]]], top_k: int = 20
    ) -> list[dict[str, float]]:
        """The `top_k` likeliest first answer tokens per request, from the server's
        `top_logprobs`."""
        futures = [self._pool.submit(self._ask_top_tokens, t, imgs, top_k) for t, imgs in requests]
        return [f.result() for f in futures]

    def generate(
        self,
        requests: Sequence[tuple[str, Sequence[np.ndarray]]],
        max_new_tokens: int,
        stop: threading.Event | None = None,
    ) -> list[str]:
        """Answer `(prompt text, images)` requests concurrently, in order; `stop` drops unsent
        ones."""
        futures = [self._pool.submit(self._ask, t, imgs, max_new_tokens) for t, imgs in requests]
        answers = []
        for f in futures:
            if stop is not None and stop.is_set():
                for pending in futures:
                    pending.cancel()
                raise BackendError("the caller went away; the remaining requests were dropped")
            answers.append(f.result())
        return answers

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()
