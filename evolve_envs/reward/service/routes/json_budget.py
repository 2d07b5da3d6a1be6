"""`BudgetedJSONRoute`: a route class that holds a JSON body to the decoded-body budget (413) before
FastAPI parses it; `parse_json_model` then validates it straight from the bytes.

Example:
    >>> from fastapi import APIRouter
    >>> APIRouter(route_class=BudgetedJSONRoute).route_class.__name__
    'BudgetedJSONRoute'
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from evolve_envs.reward.protocol.body_budget import check_json_body
from evolve_envs.reward.service.errors import ApiError, client_input
from evolve_envs.reward.service.routes.request_body import read_body

__all__ = ["BudgetedJSONRoute", "json_body_doc", "parse_json_model"]

M = TypeVar("M", bound=BaseModel)

# Bodies larger than this are scanned off the event loop.
_THREAD_SCAN_BYTES = 1 << 20


class BudgetedJSONRoute(APIRoute):
    """An `APIRoute` whose request bodies must fit the app's body budget before parsing."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            body = await read_body(request)
            if body:
                budget = request.app.state.service.limits.body_budget
                with client_input("request body"):
                    if len(body) > _THREAD_SCAN_BYTES:
                        await asyncio.to_thread(check_json_body, body, budget)
                    else:
                        check_json_body(body, budget)
            return await handler(request)

        return checked


# A \u escape of a UTF-16 surrogate that is not one half of a pair.
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)


async def parse_json_model(request: Request, model: type[M]) -> M:
    """The request's JSON body validated as `model` by pydantic's own JSON parser (no
    intermediate Python objects); errors as FastAPI reports them (400 invalid JSON, 422
    invalid fields, and 422 for text that is not valid Unicode: a lone surrogate escape)."""
    body = await read_body(request)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = [{**err, "loc": ("body", *err.get("loc", ()))} for err in exc.errors()]
        if errors and errors[0].get("type") == "json_invalid":
            found = _LONE_SURROGATE.search(body)
            if found:
                escape = found.group().decode("ascii")
                raise ApiError(
                    422,
                    f"request body holds a lone surrogate escape ({escape}): not valid "
                    "Unicode text",
                ) from None
        raise RequestValidationError(errors) from None


def json_body_doc(model: type[BaseModel]) -> dict[str, object]:
    """OpenAPI `requestBody` of a route that reads its JSON body with `parse_json_model`."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
