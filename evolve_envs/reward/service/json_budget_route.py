"""`BudgetedJSONRoute`: a FastAPI route class that holds a JSON body to the decoded-body budget
before anything parses it.

FastAPI (and `model_validate_json`) parse the whole body before a route's code runs, so the
check sits in the route class: the body is read, checked with `check_json_body` against the
app's `RequestLimits.body_budget` (413 naming the top-level field: too many values, or nested
too deeply), and only then handed to the usual handler, which reads the same cached bytes.

Example:
    >>> from fastapi import APIRouter
    >>> APIRouter(route_class=BudgetedJSONRoute).route_class.__name__
    'BudgetedJSONRoute'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from evolve_envs.reward.protocol.body_budget import check_json_body
from evolve_envs.reward.service.errors import client_input

__all__ = ["BudgetedJSONRoute"]

# Bodies larger than this are scanned off the event loop.
_THREAD_SCAN_BYTES = 1 << 20


class BudgetedJSONRoute(APIRoute):
    """An `APIRoute` whose request bodies must fit the app's body budget before parsing."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            body = await request.body()
            if body:
                budget = request.app.state.service.limits.body_budget
                with client_input("request body"):
                    if len(body) > _THREAD_SCAN_BYTES:
                        await asyncio.to_thread(check_json_body, body, budget)
                    else:
                        check_json_body(body, budget)
            return await handler(request)

        return checked
