"""The one exception reward clients raise when a reward service request fails.

A failure always names three things: the endpoint (base URL, or ``None`` when no endpoint could
be tried), the route (e.g. ``/pairwise-critic``) and the cause (connect error, timeout, HTTP
status with the server's message, or an invalid response body).

Example::

    try:
        result = client.pairwise_critic(task, a, b)
    except RewardServiceError as err:
        print(err.endpoint, err.route, err.kind, err.cause)
"""

from __future__ import annotations

__all__ = ["RewardServiceError", "ErrorKind"]


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

    Attributes:
        endpoint: base URL of the endpoint that failed last (``None`` if none was tried).
        route: the request route, e.g. ``"/trajectory-critic"``.
        cause: human-readable cause.
        kind: one of :class:`ErrorKind`'s values.
        status_code: HTTP status for ``kind == "http_status"``, else ``None``.
        attempts: how many HTTP attempts were made (retries + 1).

    Example::

        raise RewardServiceError("http://127.0.0.1:8111", "/done", "HTTP 503: overloaded")
    """

    def __init__(
        self,
        endpoint: str | None,
        route: str,
        cause: str | BaseException,
        *,
        kind: str = ErrorKind.HTTP_STATUS,
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
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


def _rebuild(endpoint, route, cause, kind, status_code, attempts) -> RewardServiceError:
    return RewardServiceError(
        endpoint, route, cause, kind=kind, status_code=status_code, attempts=attempts
    )


def _describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
