"""`read_body`: a request body read into one buffer as it arrives.

Starlette's `Request.body()` keeps every chunk the server hands it and joins them at the end, so
a 29 MB body briefly takes 58 MB, and the chunks' heap may not be handed back to the system
before a parser makes its own copy of the body. `read_body` writes each chunk into an
`io.BytesIO` and drops it, and `getvalue()`
hands that buffer over without a copy: the body costs its own size (plus the buffer's growth
margin while it is read). The result is cached where `Request.body()` finds it, so later
readers get the same bytes. Bodies over the limit are refused while they arrive by
`BodyLimitMiddleware`.

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
    >>> asyncio.run(request.body())
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
