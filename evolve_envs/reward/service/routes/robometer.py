"""Robometer's evaluation routes, answered by any backend: `POST /evaluate_batch` (JSON) and
`POST /evaluate_batch_npy` (multipart with `.npy` parts); docs/PROTOCOLS.md, section 5.

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
import math
import tokenize
from collections.abc import Iterator, Sequence
from email.message import Message

import numpy as np
from fastapi import APIRouter, Request

from evolve_envs.reward.protocol.body_budget import (
    DEFAULT_BODY_BUDGET,
    BodyBudget,
    BodyBudgetError,
    check_json_body,
)
from evolve_envs.reward.protocol.critic_math import value_list
from evolve_envs.reward.service.backends.base import CriticItem, DoneItem
from evolve_envs.reward.service.errors import ApiError, client_input
from evolve_envs.reward.service.limits import DEFAULT_LIMITS
from evolve_envs.reward.service.routes.request_body import read_body
from evolve_envs.reward.service.state.batching import prepare_frame
from evolve_envs.reward.service.state.service_state import ServiceState, State

__all__ = ["router", "form_parts", "parse_json_samples", "parse_multipart_samples", "samples_of"]

router = APIRouter(tags=["robometer"])

_NUMPY_REF = "__numpy_file__"
#: Most bytes of one form field (a sample's JSON; its arrays travel as ``.npy`` parts).
MAX_FIELD_BYTES = 1 << 20
#: Most bytes of a part's headers.
_MAX_PART_HEADER_BYTES = 16 * 1024


def samples_of(payload: object) -> list[dict[str, object]]:
    """The sample list of a JSON payload (``{"samples": [...]}`` or a bare list)."""
    samples = payload.get("samples") if isinstance(payload, dict) else payload
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise ApiError(422, "expected {'samples': [...]} or a list of sample objects")
    return samples


def parse_json_samples(body: bytes, budget: BodyBudget = DEFAULT_BODY_BUDGET) -> list[dict]:
    """The samples of a JSON body, held to `budget` before it is parsed (413, 400, 422).

    >>> parse_json_samples(b'[{"sample_type": "progress"}]')
    [{'sample_type': 'progress'}]
    """
    try:
        check_json_body(body, budget)
    except BodyBudgetError as exc:
        raise BodyBudgetError(
            f"{exc}; send frames as .npy file parts to /evaluate_batch_npy",
            field=None,
            status_code=exc.status_code,
        ) from None
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"invalid JSON: {exc}") from None
    return samples_of(payload)


def _boundary(content_type: str) -> bytes:
    header = Message()
    header["content-type"] = content_type
    if header.get_content_type() != "multipart/form-data":
        raise ApiError(415, f"expected multipart/form-data, got {content_type[:80]!r}")
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not 1 <= len(boundary) <= 70 or not boundary.isascii():
        raise ApiError(400, "multipart/form-data needs a boundary parameter of 1 to 70 characters")
    return boundary.encode("ascii")


def form_parts(
    content_type: str, body: bytes, max_parts: int = DEFAULT_LIMITS["max_form_parts"]
) -> Iterator[tuple[Message, memoryview]]:
    """The parts of a ``multipart/form-data`` body: each one's headers and a view of its
    content in `body` (no copy). More than `max_parts` parts: 413, before any is read.

    >>> body = b'--B\\r\\nContent-Disposition: form-data; name="a"\\r\\n\\r\\nhi\\r\\n--B--\\r\\n'
    >>> [(h.get_param("name", header="content-disposition"), bytes(v))
    ...  for h, v in form_parts("multipart/form-data; boundary=B", body)]
    [('a', b'hi')]
    """
    delimiter = b"--" + _boundary(content_type)
    if body.count(delimiter) > max_parts + 1:  # the closing delimiter is one more
        raise ApiError(
            413, f"multipart body has more than {max_parts} parts (the limit)", limit=max_parts
        )
    malformed = "malformed multipart body"
    pos = body.find(delimiter)
    if pos < 0 or (pos > 0 and body[pos - 2 : pos] != b"\r\n"):
        raise ApiError(400, f"{malformed}: no opening boundary")
    view = memoryview(body)
    parser = email.parser.BytesHeaderParser(policy=email.policy.HTTP)
    pos += len(delimiter)
    while not body.startswith(b"--", pos):  # the closing delimiter ends the body
        eol = body.find(b"\r\n", pos, pos + 256)
        if eol < 0 or body[pos:eol].strip(b" \t"):
            raise ApiError(400, f"{malformed}: text after a boundary")
        start = eol + 2
        end = body.find(b"\r\n" + delimiter, start)
        if end < 0:
            raise ApiError(400, f"{malformed}: a part without a closing boundary")
        if body.startswith(b"\r\n", start):  # no headers
            headers, content = b"", start + 2
        else:
            blank = body.find(b"\r\n\r\n", start, min(end, start + _MAX_PART_HEADER_BYTES))
            if blank < 0:
                raise ApiError(400, f"{malformed}: a part's headers end nowhere in 16 KiB")
            headers, content = body[start : blank + 2], blank + 4
        yield parser.parsebytes(headers), view[content:end]
        pos = end + 2 + len(delimiter)


def _npy_array(data: memoryview, name: str) -> np.ndarray:
    """The array of a ``.npy`` file, over `data` itself; never unpickles (422 otherwise)."""
    fmt = np.lib.format
    stream = io.BytesIO(data[: 10 + 10_000])  # magic, version, header length, header
    what = f"file part {name[:80]!r} is not a readable .npy array"
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError) as exc:
        raise ApiError(422, f"{what}: {exc}") from None
    if dtype.hasobject:
        raise ApiError(422, f"{what}: object arrays are refused (they would need a pickle)")
    if not all(type(n) is int and n >= 0 for n in shape) or dtype.itemsize == 0:
        raise ApiError(422, f"{what}: shape {shape!r:.80} of {dtype} is not an array's")
    offset = stream.tell()
    count = math.prod(shape)
    if count * dtype.itemsize > len(data) - offset:
        raise ApiError(422, f"{what}: it holds fewer bytes than its shape {shape} needs")
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape, order="F" if fortran else "C")


def parse_multipart_samples(
    content_type: str,
    body: bytes,
    max_parts: int = DEFAULT_LIMITS["max_form_parts"],
    budget: BodyBudget = DEFAULT_BODY_BUDGET,
) -> list[dict[str, object]]:
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
    fields: dict[str, bytes] = {}
    arrays: dict[str, np.ndarray] = {}
    for headers, data in form_parts(content_type, body, max_parts):
        name = headers.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        filename = headers.get_filename()
        if filename:
            if filename.endswith(".npy"):  # Robometer's server skips other files too
                arrays[name] = _npy_array(data, name)
            continue
        if len(data) > MAX_FIELD_BYTES:
            raise ApiError(
                413,
                f"form field {name[:80]!r} is {len(data)} bytes, more than {MAX_FIELD_BYTES}; "
                "send arrays as .npy file parts",
                limit=MAX_FIELD_BYTES,
            )
        fields[name] = bytes(data)
    texts = []
    for i in range(len(fields)):
        raw = fields.get(f"sample_{i}")
        if raw is None:
            break
        texts.append(raw)
    if not texts:
        raise ApiError(422, "no sample_0 field in the form")
    check_json_body(b"[" + b",".join(texts) + b"]", budget)  # all samples, one budget
    samples = []
    for i, raw in enumerate(texts):
        try:
            sample = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(422, f"sample_{i} is not JSON: {exc}") from None
        samples.append(_merge_arrays(sample, arrays))
    return samples


def _merge_arrays(value: object, arrays: dict[str, np.ndarray]) -> object:
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


def _trajectory(
    state: ServiceState, sample: dict[str, object], index: int
) -> tuple[str, np.ndarray]:
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


async def _progress_curve(
    state: ServiceState, task: str, frames: Sequence[np.ndarray]
) -> list[float]:
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


def _trajectories(
    state: ServiceState, samples: list[dict[str, object]]
) -> list[tuple[str, np.ndarray]]:
    """Every sample's `(task, frames)`, within the request's frame and pixel limits."""
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise ApiError(422, "expected {'samples': [...]} or a list of sample objects")
    trajectories = [_trajectory(state, s, i) for i, s in enumerate(samples)]
    total = sum(len(f) for _, f in trajectories)
    state.check_count("frames", range(total))
    pixels = sum(int(np.prod(f.shape[:3])) for _, f in trajectories)
    if pixels > state.limits.max_request_pixels:
        limit = state.limits.max_request_pixels
        raise ApiError(413, f"request holds {pixels} pixels, more than {limit}", limit=limit)
    return trajectories


async def _evaluate(state: ServiceState, samples: list[dict[str, object]]) -> dict[str, object]:
    trajectories = await asyncio.to_thread(_trajectories, state, samples)
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
async def evaluate_batch(request: Request, state: State) -> dict[str, object]:
    """Robometer's JSON batch: a progress curve per sample (see module docs)."""
    body = await read_body(request)

    def parse() -> list[dict[str, object]]:
        with client_input("request body"):
            return parse_json_samples(body, state.limits.body_budget)

    return await _evaluate(state, await asyncio.to_thread(parse))


@router.post("/evaluate_batch_npy")
async def evaluate_batch_npy(request: Request, state: State) -> dict[str, object]:
    """Robometer's multipart batch with ``.npy`` frames (see module docs)."""
    body = await read_body(request)
    content_type = request.headers.get("content-type", "")
    limits = state.limits

    def parse() -> list[dict[str, object]]:
        with client_input("multipart body"):
            return parse_multipart_samples(
                content_type, body, limits.max_form_parts, limits.body_budget
            )

    return await _evaluate(state, await asyncio.to_thread(parse))
