"""The pickle scorer protocol (deepgen_rl / VeRL-Omni / flow_grpo): `POST /pickle` and, by default,
`POST /` (docs/PROTOCOLS.md, section 3).

Example:
    >>> [route.path for route in build_router(at_root=False).routes]
    ['/pickle']
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from evolve_envs.reward.protocol.body_budget import BodyBudget, BodyBudgetError
from evolve_envs.reward.protocol.pickle_codec import (
    safe_pickle_dumps,
    safe_pickle_loads,
    to_plain,
)
from evolve_envs.reward.protocol.pickle_types import UnsafePickleError
from evolve_envs.reward.protocol.wire import PickleScoreRequest
from evolve_envs.reward.service.backends.base import ImageScoreItem
from evolve_envs.reward.service.decoding.images import decode_image_bytes
from evolve_envs.reward.service.errors import (
    PICKLE_CONTENT_TYPE,
    ApiError,
    clean_validation_errors,
    client_input,
    summarise,
    wants_json,
)
from evolve_envs.reward.service.routes.request_body import read_body
from evolve_envs.reward.service.state.service_state import State

__all__ = ["build_router", "pickle_paths"]

# Content types a web page can send cross-origin without a CORS preflight: never a pickle.
_BROWSER_SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")

_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            PICKLE_CONTENT_TYPE: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": 'pickle.dumps({"images": [bytes], "prompts": [str], '
                    '"metadata": {}}); unpickled without resolving any global',
                }
            }
        },
    },
    "responses": {
        "200": {
            "description": 'pickle.dumps({"scores": [float]})',
            "content": {PICKLE_CONTENT_TYPE: {}},
        }
    },
}


def pickle_paths(at_root: bool) -> tuple[str, ...]:
    """The paths the pickle scorer is served at."""
    return ("/pickle", "/") if at_root else ("/pickle",)


def _parse(body: bytes, budget: BodyBudget) -> tuple[PickleScoreRequest, bool]:
    """The request in `body`: unpickled (400), within `budget` (413 naming the field, 422 for a
    field that refers to itself), of the right shape (422 naming the field); and whether it looks
    like one of flow_grpo's remote scorers (their keys, or their prompts: a NumPy array)."""
    with client_input("pickle body"):
        try:
            raw = safe_pickle_loads(body, budget)
        except UnsafePickleError as exc:
            raise ApiError(400, f"rejected pickle body: {exc}") from exc
        except BodyBudgetError as exc:
            raise ApiError(exc.status_code, f"rejected pickle body: {exc}") from exc
    if not isinstance(raw, dict):
        raise ApiError(422, f"pickle body must be a dict, got {type(raw).__name__}")
    numpy_prompts = type(raw.get("prompts")).__module__ == "numpy"
    plain = {}
    for key, value in raw.items():
        with client_input(f"pickle body field {str(key)[:64]!r}", status=422):
            plain[key] = to_plain(value)
    with client_input("pickle body", status=422):
        try:
            req = PickleScoreRequest.model_validate(plain)
        except ValidationError as exc:
            errors = clean_validation_errors(exc.errors())
            raise ApiError(422, f"invalid pickle request: {summarise(errors)}") from exc
    return req, req.flow_grpo_variant or numpy_prompts


async def pickle_score(request: Request, state: State) -> Response:
    # Score images against prompts (its OpenAPI text is `build_router`'s summary).
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in _BROWSER_SIMPLE_TYPES:
        raise ApiError(
            415, f"a pickle body must not be sent as {content_type}; use {PICKLE_CONTENT_TYPE}"
        )
    state.require("image_score")
    body = await read_body(request)
    req, flow_grpo = await asyncio.to_thread(_parse, body, state.limits.body_budget)
    state.check_count("images", req.images)
    for i, prompt in enumerate(req.prompts or []):
        state.check_text(f"prompts[{i}]", prompt)
    budget = state.pixel_budget()
    prompts = list(req.prompts or [])

    async def make_chunk(lo: int, hi: int) -> list[ImageScoreItem]:
        images = await state.decode(
            req.images[lo:hi], "images", budget, decoder=decode_image_bytes, first_index=lo
        )
        return [
            ImageScoreItem(prompt, image, dict(req.metadata))
            for prompt, image in zip(prompts[lo:hi], images, strict=True)
        ]

    scores = await state.run_in_chunks("image", len(req.images), make_chunk, request)
    payload: dict[str, object] = {"scores": [float(s) for s in scores]}
    if flow_grpo:  # flow_grpo's remote scorers read these keys
        payload.update(
            outputs=payload["scores"],
            rewards=payload["scores"],
            strict_rewards=payload["scores"],
            group_rewards={},
            group_strict_rewards={},
        )
    if wants_json(request):
        return JSONResponse(payload)
    return Response(safe_pickle_dumps(payload), media_type=PICKLE_CONTENT_TYPE)


def build_router(at_root: bool = True) -> APIRouter:
    """The pickle scorer's router: `/pickle`, and `/` too when `at_root`."""
    router = APIRouter(tags=["pickle scorer"])
    for path in pickle_paths(at_root):
        router.add_api_route(
            path,
            pickle_score,
            methods=["POST"],
            summary="Score images against prompts (pickle protocol)",
            openapi_extra=_OPENAPI,
            response_class=Response,
        )
    return router
