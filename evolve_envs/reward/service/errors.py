"""The reward service's error answers: `ApiError` and the exception handlers that turn errors
into JSON `{"error": message, ...}` (pickle for the pickle routes unless `Accept` asks for JSON).

Example:
    >>> from fastapi import FastAPI
    >>> app = FastAPI()
    >>> install_error_handlers(app, pickle_paths={"/pickle"})
    >>> ApiError in app.exception_handlers
    True
    >>> json_error(413, "too big", limit=10).body
    b'{"error":"too big","limit":10}'
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from evolve_envs.reward.protocol.body_budget import BodyBudgetError
from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps
from evolve_envs.reward.service.decoding.images import ImageDecodeError
from evolve_envs.reward.service.decoding.video import VideoDecodeError

__all__ = [
    "ApiError",
    "PICKLE_CONTENT_TYPE",
    "clean_validation_errors",
    "client_input",
    "install_error_handlers",
    "json_error",
    "summarise",
    "wants_json",
]

log = logging.getLogger("evolve_envs.reward.service")

PICKLE_CONTENT_TYPE = "application/octet-stream"


class ApiError(Exception):
    """An error answered as JSON `{"error": message, **extra}` with `status_code`."""

    def __init__(self, status_code: int, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.extra = extra


# Errors that already say what was wrong with a client's input, with their status.
_CLIENT_ERRORS = (
    ApiError,
    BodyBudgetError,
    ImageDecodeError,
    VideoDecodeError,
    StarletteHTTPException,
    RequestValidationError,
)


@contextmanager
def client_input(what: str, status: int = 400) -> Iterator[None]:
    """Answer `status` naming `what` for any failure while decoding a client's `what`.

    The last resort behind the decoders (a `RecursionError`, a parser's own exception): logged at
    WARNING as "malformed client input"; their own 4xx errors pass through.

    Example:
        >>> try:
        ...     with client_input("metadata"):
        ...         raise RecursionError("maximum recursion depth exceeded")
        ... except ApiError as exc:
        ...     print(exc.status_code, exc.message)
        400 metadata could not be decoded (RecursionError)
    """
    try:
        yield
    except _CLIENT_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed input must never become a 500
        log.warning("malformed client input in %s", what, exc_info=True)
        raise ApiError(status, f"{what} could not be decoded ({type(exc).__name__})") from None


def json_error(status: int, message: str, **extra: object) -> JSONResponse:
    """The JSON error answer `{"error": message, **extra}` with `status`."""
    return JSONResponse({"error": message, **extra}, status_code=status)


def wants_json(request: Request) -> bool:
    """True when the request's `Accept` header asks for JSON."""
    return "application/json" in request.headers.get("accept", "")


#: Validation errors listed in a 4xx answer's `detail` (its message counts them all).
MAX_DETAIL = 20


def clean_validation_errors(errors: Sequence[object]) -> list[dict[str, object]]:
    """Pydantic errors reduced to `type`, `loc` (as strings) and `msg`."""
    cleaned = []
    for err in errors:
        item = {k: err[k] for k in ("type", "loc", "msg") if k in err}
        item["loc"] = [str(part) for part in item.get("loc", [])]
        cleaned.append(item)
    return cleaned


def summarise(errors: list[dict[str, object]], total: int | None = None) -> str:
    """The first three cleaned errors as one line: `loc: msg; ...`, and how many more of
    `total` (default: all of `errors`) there were."""
    parts = [f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors[:3]]
    total = len(errors) if total is None else total
    more = f" (+{total - 3} more)" if total > 3 else ""
    return "; ".join(parts) + more


class _Handlers:
    """The app's exception handlers; `pickle_paths` answer `ApiError`s as pickles."""

    def __init__(self, pickle_paths: Collection[str]) -> None:
        self.pickle_paths = frozenset(pickle_paths)

    async def api_error(self, request: Request, exc: ApiError) -> Response:
        if request.url.path in self.pickle_paths and not wants_json(request):
            return Response(
                safe_pickle_dumps({"error": exc.message}),
                status_code=exc.status_code,
                media_type=PICKLE_CONTENT_TYPE,
            )
        return json_error(exc.status_code, exc.message, **exc.extra)

    async def decode_error(
        self, request: Request, exc: ImageDecodeError | VideoDecodeError | BodyBudgetError
    ) -> Response:
        return await self.api_error(request, ApiError(exc.status_code, str(exc)))

    @staticmethod
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        raw = exc.errors()
        detail = clean_validation_errors(raw[:MAX_DETAIL])  # small whatever the body held
        if any(e.get("type") == "json_invalid" for e in raw):
            return json_error(400, "request body is not valid JSON", detail=detail)
        return json_error(422, f"invalid request: {summarise(detail, len(raw))}", detail=detail)

    @staticmethod
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        response = json_error(exc.status_code, message)
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        return response

    @staticmethod
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return json_error(500, "internal server error (details in the server log)")


def install_error_handlers(app: FastAPI, pickle_paths: Collection[str]) -> None:
    """Answer every error of `app` as JSON (as a pickle on `pickle_paths`, see the module)."""
    handlers = _Handlers(pickle_paths)
    app.add_exception_handler(ApiError, handlers.api_error)
    app.add_exception_handler(ImageDecodeError, handlers.decode_error)
    app.add_exception_handler(VideoDecodeError, handlers.decode_error)
    app.add_exception_handler(BodyBudgetError, handlers.decode_error)
    app.add_exception_handler(RequestValidationError, handlers.validation_error)
    app.add_exception_handler(StarletteHTTPException, handlers.http_error)
    app.add_exception_handler(Exception, handlers.unexpected)
