"""Bounded answers: at most `max_response_bytes` decoded bytes, and nothing past the call's
deadline.

A reward client reads every answer through :func:`read_bounded` (the endpoint pool's
:class:`~evolve_envs.reward.clients.failover_transport.FailoverTransport` calls it once per
response and per health probe), so a hostile or broken endpoint cannot make the trainer hold
more than the cap or wait past its call budget:

* **size**: the body is read raw and decompressed here, never by httpx, with
  `zlib.decompressobj(...).decompress(data, max_length)`, so a gzip bomb (a few MB that inflate
  to gigabytes) costs at most the cap before :class:`ResponseTooLarge` is raised and the
  connection is dropped. Only `gzip` and `deflate` are decoded (the client asks for nothing
  else in `Accept-Encoding`); any other `Content-Encoding` raises :class:`ResponseRefused`.
  A declared `Content-Length` past the cap is refused before the body is read.
* **time**: the deadline (monotonic seconds; the pool sets it to the start of the call plus its
  call budget) applies to the whole exchange, not to each read: :class:`DeadlineHTTPTransport`
  cuts every connect, write and read of its sockets to what is left of it, so a server that
  sends its status line, headers or body one byte a second fails with `httpx.ReadTimeout` once
  the budget is spent, and the body loop checks the deadline between chunks too.

The default cap, :data:`DEFAULT_MAX_RESPONSE_BYTES` (16 MiB), is far above any answer of the
three protocols (a few KB of scores); `EndpointPool(max_response_bytes=...)` changes it.

Example: a 1 MiB answer read with a 64 KiB cap:

    >>> import httpx
    >>> big = httpx.Response(200, stream=httpx.ByteStream(b"0" * (1 << 20)))
    >>> try:
    ...     read_bounded(big, httpx.Request("GET", "http://x/health"), 64 << 10, None)
    ... except ResponseTooLarge as exc:
    ...     print(exc)
    answer body is over the client's limit of 65536 bytes (max_response_bytes)
"""

from __future__ import annotations

import contextvars
import time
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import httpcore
import httpx

if TYPE_CHECKING:
    import ssl

    from httpcore._backends.base import SOCKET_OPTION as SocketOption

__all__ = [
    "ACCEPT_ENCODING",
    "DEADLINE",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DeadlineHTTPTransport",
    "ResponseRefused",
    "ResponseTooLarge",
    "call_deadline",
    "read_bounded",
]

#: the most decoded bytes one answer may have (`EndpointPool(max_response_bytes=...)`)
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: request extension: the monotonic time by which the whole exchange must be over
DEADLINE = "reward_deadline"
#: what the clients ask for (and all they decode)
ACCEPT_ENCODING = "gzip, deflate"

_DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "reward_call_deadline", default=None
)


class ResponseRefused(httpx.DecodingError):
    """An answer the client does not read: over the size limit, or in an encoding it does not
    decode (the endpoint is broken or hostile; the pool reports it as an invalid response)."""


class ResponseTooLarge(ResponseRefused):
    """An answer whose body, decoded, is over `max_response_bytes`."""


# ----------------------------------------------------------------------------- deadline


class call_deadline:  # noqa: N801 - used like a function: `with call_deadline(t): ...`
    """Within the block, sockets of :class:`DeadlineHTTPTransport` never wait past `deadline`
    (monotonic seconds; `None`: no deadline). A context manager, per thread/context.

    >>> with call_deadline(time.monotonic() + 5):
    ...     0 < _time_left(None, httpcore.ReadTimeout) <= 5
    True
    """

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> None:
        self._token = _deadline.set(self._deadline)

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        _deadline.reset(self._token)


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` cut to what is left before the current deadline; `error` once it is past."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the call's time budget is spent")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every operation waits at most until the current deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous sockets, each cut to the current deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, left, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineHTTPTransport(httpx.HTTPTransport):
    """httpx's HTTP transport (connection pooling, keep-alive, TLS) on sockets that never wait
    past the deadline set with :class:`call_deadline`: a total time limit for a request, its
    status line, headers and body, where httpx's own timeouts apply to each read.

    >>> transport = DeadlineHTTPTransport(limits=httpx.Limits(max_connections=4))
    >>> transport.close()
    """

    def __init__(self, *, limits: httpx.Limits | None = None, trust_env: bool = False) -> None:
        limits = limits or httpx.Limits()
        super().__init__(limits=limits, trust_env=trust_env)
        # httpx builds the same pool without a way to pass a network backend; rebuilt with one.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=trust_env),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )


# ---------------------------------------------------------------------------------- size


class _Inflate:
    """One gzip or deflate layer, decompressed at most `limit` bytes at a time."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: a gzip header; deflate: a zlib header, or (as some servers send) raw deflate
        wbits = zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(wbits)
        self._first = True

    def decompress(self, data: bytes, limit: int) -> bytes:
        """The decoded bytes of `data`; more than `limit` raise :class:`ResponseTooLarge`
        (zlib stops at `limit + 1`, so a bomb never inflates further)."""
        try:
            out = self._zlib.decompress(data, limit + 1)
        except zlib.error:
            if not (self._first and self.encoding == "deflate"):
                raise
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._zlib.decompress(data, limit + 1)
        self._first = False
        if len(out) > limit or self._zlib.unconsumed_tail:
            raise ResponseTooLarge(
                f"answer body is over the client's limit of {limit} bytes (max_response_bytes) "
                f"once {self.encoding}-decompressed"
            )
        return out

    def flush(self) -> bytes:
        """What zlib still holds once every byte was given (a few hundred bytes at most)."""
        return self._zlib.flush() if not self._zlib.eof else b""


class _Decoder:
    """The answer's `Content-Encoding` layers, undone within `limit` decoded bytes."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        self.limit = limit
        self.size = 0
        layers = []
        for name in (part.strip().lower() for part in content_encoding.split(",")):
            if name in ("", "identity"):
                continue
            if name in ("gzip", "x-gzip", "deflate"):
                layers.append(_Inflate("deflate" if name == "deflate" else "gzip"))
                continue
            raise ResponseRefused(
                f"answer is {name}-encoded; the client decodes only gzip and deflate (it asks "
                f"for {ACCEPT_ENCODING!r})"
            )
        self.layers = layers[::-1]  # the last encoding applied is undone first

    def _add(self, data: bytes) -> bytes:
        self.size += len(data)
        if self.size > self.limit:
            raise ResponseTooLarge(
                f"answer body is over the client's limit of {self.limit} bytes "
                "(max_response_bytes)" + (" once decompressed" if self.layers else "")
            )
        return data

    def decode(self, data: bytes) -> bytes:
        for layer in self.layers:
            data = layer.decompress(data, self.limit - self.size)
        return self._add(data)

    def flush(self) -> bytes:
        data = b""
        for layer in self.layers:
            if data:
                data = layer.decompress(data, self.limit - self.size)
            data += layer.flush()
        return self._add(data)


def _declared_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers.get("content-length", ""))
    except ValueError:
        return None


def read_bounded(
    response: httpx.Response, request: httpx.Request, limit: int, deadline: float | None
) -> httpx.Response:
    """The answer `response` read whole (decoded), or an error; `response` is closed either way.

    At most `limit` decoded bytes are held (:class:`ResponseTooLarge` past it, the connection
    dropped without reading the rest); `deadline` (monotonic seconds, or `None`) is checked
    between chunks (`httpx.ReadTimeout` past it). An answer an injected transport already holds
    in memory (e.g. `httpx.MockTransport`) is only checked against `limit`. The answer comes
    back as a new response holding the decoded body (without `Content-Encoding`).
    """
    try:
        body = response.content  # already in memory: built by an in-process transport
    except httpx.ResponseNotRead:
        pass
    else:
        if len(body) > limit:
            raise ResponseTooLarge(
                f"answer body is over the client's limit of {limit} bytes (max_response_bytes)",
                request=request,
            )
        return response
    chunks: list[bytes] = []
    try:
        decoder = _Decoder(response.headers.get("content-encoding", ""), limit)
        declared = _declared_length(response)
        if not decoder.layers and declared is not None and declared > limit:
            raise ResponseTooLarge(
                f"answer declares {declared} bytes, over the client's limit of {limit} bytes "
                "(max_response_bytes)"
            )
        for raw in response.iter_raw():
            chunks.append(decoder.decode(raw))
            if deadline is not None and time.monotonic() > deadline:
                raise httpx.ReadTimeout("the call's time budget is spent", request=request)
        chunks.append(decoder.flush())
    except ResponseRefused as exc:
        exc.request = request
        raise
    except zlib.error as exc:
        raise ResponseRefused(
            f"answer body is not valid gzip/deflate: {exc}", request=request
        ) from None
    finally:
        response.close()
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in _DROPPED_HEADERS]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=b"".join(chunks),
        request=request,
        extensions=response.extensions,
    )
