"""What every reward client shares: the endpoint pool, the failure policy, a worker pool for
``submit_*`` calls, and response decoding that turns protocol violations into errors.

Not used directly; see :mod:`evolve_envs.reward.clients.progress_client`,
:mod:`evolve_envs.reward.clients.video_score_client` and
:mod:`evolve_envs.reward.clients.pickle_scorer_client`.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.failure_policy import FailurePolicy
from evolve_envs.reward.clients.pool_call import PoolResponse
from evolve_envs.reward.clients.results import CallResult, ClientStats

__all__ = ["ClientBase", "invalid_response", "parse_json_model", "check_finite"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def invalid_response(reply: PoolResponse, route: str, cause: str) -> RewardServiceError:
    """A :class:`RewardServiceError` for a 2xx reply whose body breaks the protocol."""
    return RewardServiceError(
        reply.endpoint,
        route,
        f"invalid response: {cause}",
        kind=ErrorKind.INVALID_RESPONSE,
        attempts=reply.attempts,
    )


def _summarize_validation(exc: ValidationError) -> str:
    parts = []
    for item in exc.errors()[:3]:
        loc = ".".join(str(p) for p in item.get("loc", ())) or "body"
        parts.append(f"{loc}: {item.get('msg', 'invalid')}")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(parts) + more


def parse_json_model(reply: PoolResponse, route: str, model: type[M]) -> M:
    """Decode a JSON body into ``model``; non-JSON bodies, missing fields, wrong types, NaN and
    infinities raise :class:`RewardServiceError` (kind ``invalid_response``)."""
    try:
        body = json.loads(reply.response.content)
    except (ValueError, UnicodeDecodeError) as exc:
        snippet = reply.response.content[:80]
        raise invalid_response(reply, route, f"body is not JSON ({exc}): {snippet!r}") from None
    return validate_model(reply, route, model, body)


def validate_model(reply: PoolResponse, route: str, model: type[M], payload: object) -> M:
    """Validate a decoded body against ``model`` (the protocol's models refuse NaN/inf);
    a mismatch raises :class:`RewardServiceError` (kind ``invalid_response``)."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise invalid_response(reply, route, _summarize_validation(exc)) from None


def check_finite(
    reply: PoolResponse,
    route: str,
    name: str,
    values: Sequence[float],
    low: float = -math.inf,
    high: float = math.inf,
    tolerance: float = 1e-6,
) -> list[float]:
    """Require every value finite and within ``[low, high]`` (± ``tolerance``; clipped into it)."""
    out = []
    for index, value in enumerate(values):
        v = float(value)
        if not math.isfinite(v):
            raise invalid_response(reply, route, f"{name}[{index}] is {v}")
        if v < low - tolerance or v > high + tolerance:
            raise invalid_response(
                reply, route, f"{name}[{index}] = {v} is outside [{low}, {high}]"
            )
        out.append(min(max(v, low), high))
    return out


class ClientBase:
    """Pool ownership, failure policy, ``submit_*`` executor and ``close()`` for one client.

    Args:
        pool: an :class:`EndpointPool` (closed with the client only when ``close_pool``) or
            endpoint URL(s) (a private pool is created and closed with the client).
        close_pool: the client owns ``pool`` and closes it in :meth:`close` (whoever opened a
            pool and hands it to one client passes ``True``; a pool shared by several clients
            stays with whoever opened it).
        fail_on_request_error: raise :class:`RewardServiceError` instead of falling back.
        max_workers: threads that run ``submit_*`` calls (encoding + request).
        timeout: per-attempt timeout override for this client's requests (default: the pool's).
        stats: counters to update; share one :class:`ClientStats` between clients if you like.
        warn_interval_s: minimum seconds between two failure warnings.
        name: how warnings name the client.

    A client given URLs owns the pool it makes from them and closes it with itself:

    >>> opts = dict(max_workers=1, timeout=None, stats=None, warn_interval_s=60.0, name="demo")
    >>> with ClientBase("http://127.0.0.1:8111", fail_on_request_error=True, **opts) as client:
    ...     client.pool.urls, client.fail_on_request_error, client.pool.closed
    (['http://127.0.0.1:8111'], True, False)
    >>> client.pool.closed
    True
    """

    def __init__(
        self,
        pool: EndpointPool | str | Sequence[str],
        *,
        fail_on_request_error: bool,
        max_workers: int,
        timeout: float | None,
        stats: ClientStats | None,
        warn_interval_s: float,
        name: str,
        close_pool: bool = False,
    ) -> None:
        if isinstance(pool, EndpointPool) or getattr(pool, "is_reward_transport", False):
            self.pool = pool
            self._owns_pool = bool(close_pool)
        else:
            self.pool = EndpointPool(pool)
            self._owns_pool = True
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.timeout = timeout
        self.stats = stats if stats is not None else ClientStats()
        self.policy = FailurePolicy(
            fail_on_request_error, stats=self.stats, name=name, warn_interval_s=warn_interval_s
        )
        self._max_workers = int(max_workers)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._name = name
        self._closed = False

    @property
    def fail_on_request_error(self) -> bool:
        return self.policy.fail_on_request_error

    def _request(self, method: str, route: str, **kwargs: Any) -> PoolResponse:
        return self.pool.request(method, route, timeout=self.timeout, **kwargs)

    def _run(
        self, route: str, call: Callable[[], tuple[T, str, int]], fallback: T
    ) -> CallResult[T]:
        return self.policy.run(route, call, fallback)

    def _submit(self, fn: Callable[..., CallResult[T]], *args: object) -> Future[CallResult[T]]:
        with self._executor_lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix=self._name.replace(" ", "-")
                )
            return self._executor.submit(fn, *args)

    def close(self) -> None:
        """Cancel queued calls, wait for running ones, stop the workers, close an owned pool."""
        with self._executor_lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if self._owns_pool:
            self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
