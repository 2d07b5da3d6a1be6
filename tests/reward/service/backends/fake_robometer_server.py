"""A stand-in Robometer evaluation server (FastAPI), run as its own process by the tests.

Written from Robometer's published request and answer shapes (see
``evolve_envs/reward/service/routes/robometer.py``), not from its code, and sharing none of this
package's server code:

* ``POST /evaluate_batch``: JSON ``{"samples": [...]}`` or a bare list of samples;
* ``POST /evaluate_batch_npy``: multipart form, ``sample_<i>`` JSON fields whose arrays are
  ``{"__numpy_file__": key}`` references to ``.npy`` file parts.

Each progress sample's frame t is judged by its grey level: progress = mean(frame) / 255, rounded
to 2 decimals; success probability = 1.0 when that progress is >= 0.95, else 0.0. The task text
scripts a broken answer between ``[[`` and ``]]``:

* ``[[nan]]``: progress NaN at the last frame (sent as the JSON token ``NaN``);
* ``[[short]]``: one progress value fewer than frames;
* ``[[range]]``: progress 1.5 at the last frame;
* ``[[missing]]``: no ``outputs_progress``;
* ``[[notjson]]``: a plain-text body;
* ``[[nosuccess]]``: ``outputs_success`` is null (a server without a success head).

``GET /requests`` returns what each request carried (route, content type, per sample its type,
task, frames' shape and dtype, the file parts' names); ``DELETE /requests`` forgets them.

Run::

    python -m uvicorn tests.reward.service.backends.fake_robometer_server:app --port 8001
"""

from __future__ import annotations

import email
import email.policy
import io
import json
import re
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

app = FastAPI()
RECEIVED: list[dict[str, Any]] = []
_SCRIPT = re.compile(r"\[\[(.*?)\]\]")


def _form(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    """Form fields and file parts (name -> bytes) of a multipart body."""
    raw = f"Content-Type: {content_type}\r\n\r\n".encode() + body
    message = email.message_from_bytes(raw, policy=email.policy.default)
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename():
            files[name] = payload
        else:
            fields[name] = payload.decode()
    return fields, files


def _resolve(value: Any, files: dict[str, bytes]) -> Any:
    if isinstance(value, dict) and set(value) == {"__numpy_file__"}:
        return np.load(io.BytesIO(files[value["__numpy_file__"]]), allow_pickle=False)
    if isinstance(value, dict):
        return {k: _resolve(v, files) for k, v in value.items()}
    return value


def _answer(samples: list[dict[str, Any]], route: str, content_type: str, parts: list[str]) -> Any:
    seen = []
    curves, successes = [], []
    script = ""
    for sample in samples:
        traj = sample["trajectory"]
        frames = np.asarray(traj["frames"])
        seen.append(
            {
                "sample_type": sample.get("sample_type"),
                "task": traj["task"],
                "frames_shape": list(frames.shape),
                "frames_dtype": str(frames.dtype),
                "declared_shape": traj.get("frames_shape"),
            }
        )
        found = _SCRIPT.findall(traj["task"])
        script = found[-1] if found else script
        progress = [round(float(f.mean()) / 255.0, 2) for f in frames]
        if found and found[-1] == "nan":
            progress[-1] = float("nan")
        elif found and found[-1] == "short":
            progress = progress[:-1]
        elif found and found[-1] == "range":
            progress[-1] = 1.5
        curves.append(progress)
        successes.append([1.0 if p >= 0.95 else 0.0 for p in progress])
    RECEIVED.append(
        {"route": route, "content_type": content_type, "file_parts": parts, "samples": seen}
    )
    if script == "notjson":
        return PlainTextResponse("progress: high")
    out: dict[str, Any] = {
        "outputs_preference": None,
        "outputs_progress": {
            "progress_pred": curves,
            "metadata": [{"num_frames": len(c)} for c in curves],
        },
        "outputs_success": {"success_probs": successes},
    }
    if script == "missing":
        del out["outputs_progress"]
    if script == "nosuccess":
        out["outputs_success"] = None
    # json.dumps writes NaN as the bare token, as Python servers do
    return Response(json.dumps(out), media_type="application/json")


@app.get("/requests")
async def requests() -> list[dict[str, Any]]:
    return RECEIVED


@app.delete("/requests")
async def forget() -> dict[str, int]:
    RECEIVED.clear()
    return {"forgotten": 1}


@app.post("/evaluate_batch", response_model=None)
async def evaluate_batch(request: Request) -> Any:
    payload = json.loads(await request.body())
    samples = payload["samples"] if isinstance(payload, dict) else payload
    return _answer(samples, "/evaluate_batch", request.headers.get("content-type", ""), [])


@app.post("/evaluate_batch_npy", response_model=None)
async def evaluate_batch_npy(request: Request) -> Any:
    content_type = request.headers.get("content-type", "")
    fields, files = _form(content_type, await request.body())
    samples = []
    while f"sample_{len(samples)}" in fields:
        samples.append(_resolve(json.loads(fields[f"sample_{len(samples)}"]), files))
    if not samples:
        return JSONResponse({"error": "no sample_0"}, status_code=400)
    return _answer(samples, "/evaluate_batch_npy", content_type, sorted(files))
