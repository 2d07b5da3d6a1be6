"""Robometer's evaluation routes, answered by any backend: `POST /evaluate_batch` and
`POST /evaluate_batch_npy`.

Clients written for Robometer's eval server (its RLinf and policy-learning integrations) send
*progress samples* and read a per-frame progress curve and per-frame success probabilities. This
router answers them with this service's backend, so those clients run unchanged against any
model served here.

Requests (Robometer's published shapes):

* `/evaluate_batch`: JSON, either ``{"samples": [...]}`` or a bare list of samples;
* `/evaluate_batch_npy`: ``multipart/form-data``; the form field ``sample_<i>`` holds sample i as
  JSON, in which an array is replaced by ``{"__numpy_file__": "<key>"}`` and sent as the file
  part ``<key>`` (a ``.npy`` file; e.g. ``sample_0_trajectory_frames``). ``.npy`` files are read
  with ``allow_pickle=False``.

A sample is ``{"sample_type": "progress", "trajectory": {"task": str, "frames": uint8 array
T x H x W x 3, ...}}``; other fields (``use_frame_steps``, ``frame_stride``, ``frames_shape``,
metadata) are accepted and ignored. Preference samples are refused (422): no backend here
compares two trajectories.

Answer::

    {"outputs_preference": null,
     "outputs_progress": {"progress_pred": [[p_0, ..., p_T-1], ...],
                          "metadata": [{"num_frames": T}, ...]},
     "outputs_success": {"success_probs": [[s_0, ..., s_T-1], ...]}}

Progress of frame t is the backend's `/done` probability for frame t against the sample's first
frame (backends without `done`: the accumulated `/trajectory-critic` values / 100); success
probabilities are the same numbers, since every backend here decides done by thresholding its
progress. The limits of the other routes apply (frames per request, image side, pixels, text).

Example:
    >>> [route.path for route in router.routes]
    ['/evaluate_batch', '/evaluate_batch_npy']
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import io
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from evolve_envs.reward.protocol.progress import value_list
from evolve_envs.reward.service.backends.base import CriticItem, DoneItem
from evolve_envs.reward.service.batching import prepare_frame
from evolve_envs.reward.service.errors import ApiError
from evolve_envs.reward.service.service_state import State

__all__ = ["router", "parse_multipart_samples", "samples_of"]

router = APIRouter(tags=["robometer"])

_NUMPY_REF = "__numpy_file__"


def samples_of(payload: Any) -> list[dict[str, Any]]:
    """The sample list of a JSON payload (``{"samples": [...]}`` or a bare list)."""
    samples = payload.get("samples") if isinstance(payload, dict) else payload
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise ApiError(422, "expected {'samples': [...]} or a list of sample objects")
    return samples


def parse_multipart_samples(content_type: str, body: bytes) -> list[dict[str, Any]]:
    """Robometer's multipart batch: ``sample_<i>`` JSON fields with ``.npy`` file parts merged in.

    >>> buf = io.BytesIO(); np.save(buf, np.zeros((1, 2, 2, 3), np.uint8))
    >>> sample = {"sample_type": "progress",
    ...           "trajectory": {"task": "t", "frames": {"__numpy_file__": "f0"}}}
    >>> body = (b'--B\\r\\nContent-Disposition: form-data; name="sample_0"\\r\\n\\r\\n'
    ...         + json.dumps(sample).encode() + b'\\r\\n--B\\r\\nContent-Disposition: form-data; '
    ...         b'name="f0"; filename="f0.npy"\\r\\n\\r\\n' + buf.getvalue() + b'\\r\\n--B--\\r\\n')
    >>> parse_multipart_samples("multipart/form-data; boundary=B", body)[0]["trajectory"]["frames"].shape
    (1, 2, 2, 3)
    """  # noqa: E501
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(415, f"expected multipart/form-data, got {content_type[:80]!r}")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise ApiError(400, "malformed multipart body")
    fields: dict[str, str] = {}
    arrays: dict[str, np.ndarray] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        data = part.get_payload(decode=True) or b""
        if part.get_filename():
            if not part.get_filename().endswith(".npy"):
                continue  # Robometer's server skips other files too
            try:
                arrays[name] = np.load(io.BytesIO(data), allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                msg = f"file part {name!r} is not a readable .npy array: {exc}"
                raise ApiError(422, msg) from None
        else:
            fields[name] = data.decode("utf-8", errors="replace")
    samples = []
    for i in range(len(fields)):
        raw = fields.get(f"sample_{i}")
        if raw is None:
            break
        try:
            sample = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ApiError(422, f"sample_{i} is not JSON: {exc}") from None
        samples.append(_merge_arrays(sample, arrays))
    if not samples:
        raise ApiError(422, "no sample_0 field in the form")
    return samples


def _merge_arrays(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_NUMPY_REF}:
            key = value[_NUMPY_REF]
            if key not in arrays:
                raise ApiError(422, f"missing .npy file part {str(key)[:80]!r}")
            return arrays[key]
        return {k: _merge_arrays(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_merge_arrays(v, arrays) for v in value]
    return value


def _trajectory(state: Any, sample: dict[str, Any], index: int) -> tuple[str, np.ndarray]:
    """`(task, frames)` of a progress sample, checked against the service limits."""
    kind = sample.get("sample_type", "progress")
    if kind != "progress":
        raise ApiError(422, f"sample {index}: only progress samples are served, not {kind!r}")
    traj = sample.get("trajectory")
    if not isinstance(traj, dict):
        raise ApiError(422, f"sample {index}: 'trajectory' must be an object")
    task = traj.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ApiError(422, f"sample {index}: trajectory.task must be a non-empty string")
    state.check_text("task", task)
    try:
        frames = np.asarray(traj.get("frames"))
    except (ValueError, TypeError) as exc:
        raise ApiError(422, f"sample {index}: frames are not an array: {exc}") from None
    if frames.ndim == 3:  # one frame
        frames = frames[None]
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] == 0:
        raise ApiError(422, f"sample {index}: frames must be T x H x W x 3, got {frames.shape}")
    if frames.dtype != np.uint8:
        if not np.issubdtype(frames.dtype, np.integer) or frames.min() < 0 or frames.max() > 255:
            raise ApiError(422, f"sample {index}: frames must be uint8, got {frames.dtype}")
        frames = frames.astype(np.uint8)
    side = state.limits.max_image_side
    if max(frames.shape[1:3]) > side:
        raise ApiError(413, f"sample {index}: frames exceed {side} pixels a side", limit=side)
    return task, frames


async def _progress_curve(state: Any, task: str, frames: Sequence[np.ndarray]) -> list[float]:
    first = frames[0]
    if state.backend.supports("done"):
        items = [
            DoneItem(task, first, frames[max(t - 1, 0)], frames[t]) for t in range(len(frames))
        ]
        answers = await state.guarded(lambda: state.batcher.run("done", items))
        return [float(prob) for _, prob in answers]
    items = [CriticItem(task, frames[t - 1], frames[t], first) for t in range(1, len(frames))]
    critics = await state.guarded(lambda: state.batcher.run("critic", items)) if items else []
    return [min(1.0, max(0.0, v / 100.0)) for v in value_list(critics)]


async def _evaluate(state: Any, samples: list[dict[str, Any]]) -> dict[str, Any]:
    trajectories = [_trajectory(state, s, i) for i, s in enumerate(samples)]
    total = sum(len(f) for _, f in trajectories)
    state.check_count("frames", range(total))
    pixels = sum(int(np.prod(f.shape[:3])) for _, f in trajectories)
    if pixels > state.limits.max_request_pixels:
        limit = state.limits.max_request_pixels
        raise ApiError(413, f"request holds {pixels} pixels, more than {limit}", limit=limit)
    curves = []
    for task, frames in trajectories:
        prepared = await asyncio.to_thread(lambda f=frames: [prepare_frame(x) for x in f])
        curves.append(await _progress_curve(state, task, prepared))
    return {
        "outputs_preference": None,
        "outputs_progress": {
            "progress_pred": curves,
            "metadata": [{"num_frames": len(c)} for c in curves],
        },
        "outputs_success": {"success_probs": [list(c) for c in curves]},
    }


@router.post("/evaluate_batch")
async def evaluate_batch(request: Request, state: State) -> dict[str, Any]:
    """Robometer's JSON batch: a progress curve per sample (see module docs)."""
    try:
        payload = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"invalid JSON: {exc}") from None
    return await _evaluate(state, samples_of(payload))


@router.post("/evaluate_batch_npy")
async def evaluate_batch_npy(request: Request, state: State) -> dict[str, Any]:
    """Robometer's multipart batch with ``.npy`` frames (see module docs)."""
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    samples = await asyncio.to_thread(parse_multipart_samples, content_type, body)
    return await _evaluate(state, samples)
