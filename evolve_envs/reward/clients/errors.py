"""The exceptions reward clients raise when a request fails: one base, four kinds.

Every failure names the endpoint, the route and the cause. :class:`ServiceUnreachableError`: no
answer to use (refused, reset, every endpoint down, 429/5xx), worth retrying later;
:class:`ServiceTimeoutError`; :class:`RequestRejectedError` (4xx but 429: fix the request);
:class:`BadResponseError` (a 2xx answer that breaks the protocol). Building the base with a
``kind`` gives the matching branch:

>>> err = RewardServiceError("http://127.0.0.1:8111", "/done", "HTTP 422: bad frame",
...                          kind=ErrorKind.HTTP_STATUS, status_code=422)
>>> type(err).__name__, isinstance(err, RewardServiceError)
('RequestRejectedError', True)
"""

from __future__ import annotations

__all__ = [
    "RewardServiceError",
    "ServiceUnreachableError",
    "ServiceTimeoutError",
    "RequestRejectedError",
    "BadResponseError",
    "ErrorKind",
]


class ErrorKind:
    """Short machine-readable failure categories (``RewardServiceError.kind``)."""

    CONNECT = "connect"  # connection refused / DNS / reset before a response
    TIMEOUT = "timeout"  # connect, read, write or pool timeout, or total budget spent
    HTTP_STATUS = "http_status"  # a non-2xx status (see ``status_code``)
    INVALID_RESPONSE = "invalid_response"  # 2xx with a body that breaks the protocol
    NO_ENDPOINT = "no_endpoint"  # every endpoint is marked down and not yet due for a probe
    CLOSED = "closed"  # the pool or client was closed
    LOCAL_IO = "local_io"  # the client could not write its request file (e.g. shared_dir)


class RewardServiceError(RuntimeError):
    """A reward service request failed; the message names endpoint, route and cause.

    ``endpoint`` is ``None`` when none was tried; ``status_code`` is set for ``kind ==
    "http_status"``; ``attempts`` counts the HTTP attempts (retries + 1).
    """

    def __new__(cls, *args: object, **kwargs: object) -> RewardServiceError:
        if cls is RewardServiceError:  # pick the branch of the tree from kind / status
            cls = _branch(kwargs.get("kind", ErrorKind.HTTP_STATUS), kwargs.get("status_code"))
        return super().__new__(cls)

    def __init__(
        self,
        endpoint: str | None | RewardServiceError,
        route: str = "",
        cause: str | BaseException = "",
        *,
        kind: str = ErrorKind.HTTP_STATUS,
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
        if isinstance(endpoint, RewardServiceError):  # a copy: `type(err)(err)`, as Gymnasium's
            other = endpoint  # AsyncVectorEnv re-raises a worker's error in the main process
            endpoint, route, cause = other.endpoint, other.route, other.cause
            kind, status_code, attempts = other.kind, other.status_code, other.attempts
        self.endpoint = endpoint
        self.route = route
        self.cause = cause if isinstance(cause, str) else _describe_exception(cause)
        self.kind = kind
        self.status_code = status_code
        self.attempts = attempts
        where = endpoint if endpoint is not None else "<no endpoint>"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"reward service request to {where}{route} failed{tries}: {self.cause}")

    def __reduce__(self):  # keep it picklable (futures, multiprocessing)
        return (
            _rebuild,
            (self.endpoint, self.route, self.cause, self.kind, self.status_code, self.attempts),
        )


class ServiceUnreachableError(RewardServiceError):
    """No usable answer: refused/reset connection, every endpoint down, a closed pool, or the
    service overloaded or failing (HTTP 429 or 5xx)."""


class ServiceTimeoutError(RewardServiceError):
    """An attempt, or the call's whole time budget, timed out."""


class RequestRejectedError(RewardServiceError):
    """The service refused this request (HTTP 4xx other than 429); ``status_code`` says which."""


class BadResponseError(RewardServiceError):
    """A 2xx answer whose body breaks the protocol (not JSON, wrong fields or lengths)."""


def _branch(kind: object, status_code: object) -> type[RewardServiceError]:
    if kind == ErrorKind.TIMEOUT:
        return ServiceTimeoutError
    if kind == ErrorKind.INVALID_RESPONSE:
        return BadResponseError
    if kind == ErrorKind.HTTP_STATUS and isinstance(status_code, int):
        if 400 <= status_code < 500 and status_code != 429:
            return RequestRejectedError
        return ServiceUnreachableError
    if kind in (ErrorKind.CONNECT, ErrorKind.NO_ENDPOINT, ErrorKind.CLOSED):
        return ServiceUnreachableError
    return RewardServiceError


def _rebuild(endpoint, route, cause, kind, status_code, attempts) -> RewardServiceError:
    return RewardServiceError(
        endpoint, route, cause, kind=kind, status_code=status_code, attempts=attempts
    )


def _describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
