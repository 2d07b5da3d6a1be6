"""The progress protocol (VLAC-compatible): `POST /trajectory-critic`, `POST /pairwise-critic`,
`POST /done` and VLAC's `POST /healthcheck`.

Example:
    >>> [route.path for route in router.routes]
    ['/healthcheck', '/trajectory-critic', '/pairwise-critic', '/done']
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from evolve_envs.reward.protocol.critic_math import reference_indices, value_list
from evolve_envs.reward.protocol.wire import (
    DoneRequest,
    DoneResponse,
    HealthResponse,
    PairwiseCriticRequest,
    PairwiseCriticResponse,
    TrajectoryCriticRequest,
    TrajectoryCriticResponse,
)
from evolve_envs.reward.service.backends.base import CriticItem, DoneItem
from evolve_envs.reward.service.routes.json_budget import (
    BudgetedJSONRoute,
    json_body_doc,
    parse_json_model,
)
from evolve_envs.reward.service.state.service_state import State

__all__ = ["router"]

router = APIRouter(tags=["progress"], route_class=BudgetedJSONRoute)


@router.post("/healthcheck", response_model=HealthResponse)
async def healthcheck(state: State) -> HealthResponse:
    """VLAC-style health check."""
    return HealthResponse(backend=state.backend.name)


@router.post(
    "/trajectory-critic",
    response_model=TrajectoryCriticResponse,
    openapi_extra=json_body_doc(TrajectoryCriticRequest),
)
async def trajectory_critic(request: Request, state: State) -> TrajectoryCriticResponse:
    """Critics between consecutive frames of `frames[::skip]` and their accumulated values."""
    req = await parse_json_model(request, TrajectoryCriticRequest)
    state.check_count("frames", req.frames)
    state.check_text("task", req.task)
    if req.reference is not None:
        state.check_count("reference", req.reference, allow_empty=True)
    budget = state.pixel_budget()
    sampled = req.frames[:: req.skip]
    reference = None
    if req.reference:
        keep = reference_indices(len(req.reference), req.ref_num)
        reference = tuple(await state.decode(req.reference, "reference", budget, keep=keep))
    (first,) = await state.decode(sampled[:1], "frames", budget)
    last = {"frame": first}

    async def make_chunk(lo: int, hi: int) -> list[CriticItem]:
        frames = await state.decode(sampled[lo + 1 : hi + 1], "frames", budget, first_index=lo + 1)
        items = []
        for frame in frames:
            items.append(CriticItem(req.task, last["frame"], frame, first, reference))
            last["frame"] = frame
        return items

    critics = await state.run_in_chunks("critic", len(sampled) - 1, make_chunk, request)
    critic_list = [float(c) for c in critics]
    return TrajectoryCriticResponse(value_list=value_list(critic_list), critic_list=critic_list)


@router.post(
    "/pairwise-critic",
    response_model=PairwiseCriticResponse,
    openapi_extra=json_body_doc(PairwiseCriticRequest),
)
async def pairwise_critic(request: Request, state: State) -> PairwiseCriticResponse:
    """How much closer `image_b` is to completing `task` than `image_a`, in [-100, 100]."""
    req = await parse_json_model(request, PairwiseCriticRequest)
    state.require("pairwise")
    state.check_text("task", req.task)
    budget = state.pixel_budget()
    a, b = await state.decode([req.image_a, req.image_b], "images", budget)
    item = CriticItem(req.task, a, b, a)
    (critic,) = await state.guarded(lambda: state.batcher.run("critic", [item]))
    return PairwiseCriticResponse(critic=float(critic))


@router.post("/done", response_model=DoneResponse, openapi_extra=json_body_doc(DoneRequest))
async def done(request: Request, state: State) -> DoneResponse:
    """Whether `curr_frame` shows the task completed, with a probability."""
    req = await parse_json_model(request, DoneRequest)
    state.require("done")
    state.check_text("task", req.task)
    if req.reference is not None:
        state.check_count("reference", req.reference, allow_empty=True)
    budget = state.pixel_budget()
    first, prev, curr = await state.decode(
        [req.first_frame, req.prev_frame, req.curr_frame], "done", budget
    )
    reference = None
    if req.reference:
        reference = tuple(await state.decode(req.reference, "reference", budget))
    item = DoneItem(req.task, first, prev, curr, reference)
    ((is_done, prob),) = await state.guarded(lambda: state.batcher.run("done", [item]))
    return DoneResponse(done=bool(is_done), prob=float(prob))
