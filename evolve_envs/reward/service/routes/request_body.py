"""`read_body`: a request body read into one buffer as it arrives (Starlette's `Request.body()`
holds every chunk and then their join: twice the body), cached where `Request.body()` finds it.

Example:
    >>> import asyncio
    >>> from starlette.requests import Request
    >>> chunks = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
    ...           {"type": "http.request", "body": b"1}", "more_body": False}]
    >>> async def receive():
    ...     return chunks.pop(0)
    >>> request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    >>> asyncio.run(read_body(request))
    b'{"a": 1}'
"""

from __future__ import annotations

import io

from starlette.requests import Request

__all__ = ["read_body"]


async def read_body(request: Request) -> bytes:
    """The request's body, written chunk by chunk into one buffer, and cached on `request`."""
    if not hasattr(request, "_body"):
        buffer = io.BytesIO()
        async for chunk in request.stream():
            buffer.write(chunk)
        request._body = buffer.getvalue()
    return request._body
