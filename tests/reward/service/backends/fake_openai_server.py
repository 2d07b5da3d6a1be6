"""A scripted OpenAI-compatible chat server (FastAPI), run as its own process by the tests.

`POST /v1/chat/completions` answers what the prompt asks it to: the text between ``[[`` and
``]]`` in the last user message (the tests put it in the task text) is the answer.

* ``[[ANSWER: 4]]``: the answer text is ``ANSWER: 4`` (streamed in two chunks when the request
  streams, else one JSON answer);
* ``[[logprobs True=-0.36,False=-1.5]]``: a one-token answer whose `logprobs.content[0]` lists
  those tokens and log-probabilities as `top_logprobs` (the first is the chosen token).

`GET /v1/models` lists the served model; `GET /requests` returns every request body received
(images shortened), so a test can check what the reward backend sent.

Run::

    python -m uvicorn tests.reward.service.backends.fake_openai_server:app --port 8000
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

app = FastAPI()
RECEIVED: list[dict[str, Any]] = []
_SCRIPT = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)


def _user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def _shorten(body: dict[str, Any]) -> dict[str, Any]:
    """The request with each image URL cut to its first 30 characters."""
    out = json.loads(json.dumps(body))
    for message in out["messages"]:
        if isinstance(message["content"], list):
            for part in message["content"]:
                if part.get("type") == "image_url":
                    part["image_url"]["url"] = part["image_url"]["url"][:30]
    return out


def _logprobs(spec: str) -> dict[str, Any]:
    alternatives = []
    for item in spec.split(","):
        token, _, value = item.strip().rpartition("=")
        alternatives.append({"token": token, "logprob": float(value), "bytes": None})
    first = alternatives[0]
    return {"content": [{**first, "top_logprobs": alternatives}]}


@app.get("/v1/models")
async def models() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "t"}]}


@app.get("/requests")
async def requests() -> list[dict[str, Any]]:
    return RECEIVED


@app.post("/v1/chat/completions", response_model=None)
async def chat(request: Request) -> JSONResponse | StreamingResponse:
    body = await request.json()
    RECEIVED.append(_shorten(body))
    found = _SCRIPT.findall(_user_text(body))
    script = found[-1] if found else ""
    logprobs = None
    text = script
    if script.startswith("logprobs "):
        logprobs = _logprobs(script[len("logprobs ") :])
        text = logprobs["content"][0]["token"]
    head = {"id": "chatcmpl-1", "created": int(time.time()), "model": body["model"]}
    if body.get("stream"):

        def chunks() -> Any:
            halves = [text[: len(text) // 2], text[len(text) // 2 :]]
            for piece in halves:
                delta = {"role": "assistant", "content": piece}
                chunk = {**head, "object": "chat.completion.chunk"}
                chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop",
        "logprobs": logprobs,
    }
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": usage})
