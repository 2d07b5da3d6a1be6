"""Bounded answers: every client reads at most `max_response_bytes` decoded bytes per answer and
ends every call by its budget, against a real hostile HTTP server on 127.0.0.1.

The server serves (a) a gzip bomb: 256 KB that inflate to 256 MiB, and (b) answers sent one
byte a second (the status line and headers too, or only the body). Each call must fail fast
with a typed error (`BadResponseError`, `ServiceTimeoutError`), the process's peak memory must
grow by less than 64 MB, and a trainer's client (fail-soft failure policy, the env wrapper)
must count the failure and go on with its fallback value.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.reward.clients.bounded_read import DEFAULT_MAX_RESPONSE_BYTES
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import BadResponseError, ServiceTimeoutError
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.robometer_client import RobometerClient
from evolve_envs.reward.clients.service_check import ServiceUnavailableError, check_service
from evolve_envs.reward.clients.video_score_client import VideoScoreClient
from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps
from evolve_envs.wrappers.model_handle import lend
from tests.reward.clients.client_helpers import Answer, HostileHTTPServer, paint, within_guard

BOMB_MIB = 256
BUDGET_S = 1.5  # the call budget (reward_model.call_budget_s) of these tests
SLACK_S = 1.5  # what a call may take past its budget (closing, scheduling on a busy machine)
MEMORY_LIMIT_MB = 64
ROUTES = ("/pairwise-critic", "/trajectory-critic", "/done", "/score", "/", "/capabilities")
ROUTES += ("/evaluate_batch_npy", "/health")
JSON_TYPE = {"content-type": "application/json"}


@functools.lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """`BOMB_MIB` MiB of zeros, gzip-compressed (about 1/1000 of that on the wire)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join([packer.compress(zeros) for _ in range(BOMB_MIB)] + [packer.flush()])


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def peak_growth_mb(fn: Callable[[], Any]) -> tuple[Any, float]:
    """`fn()`'s result and how far this process's peak RSS rose above its RSS before it."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_kb("VmRSS")
    result = fn()
    return result, (_status_kb("VmHWM") - before) / 1024.0


@pytest.fixture
def hostile() -> Iterator[HostileHTTPServer]:
    with HostileHTTPServer() as server:
        caps = {"backend": "hostile", "pairwise": True, "done": True}
        server.answers["/capabilities"] = Answer(200, JSON_TYPE, json.dumps(caps).encode())
        server.answers["/health"] = Answer(200, JSON_TYPE, b'{"status": "ok", "backend": "x"}')
        yield server


def _bomb(server: HostileHTTPServer, *routes: str) -> None:
    for route in routes or ROUTES:
        server.answers[route] = Answer(200, {**JSON_TYPE, "content-encoding": "gzip"}, gzip_bomb())


def _drip(server: HostileHTTPServer, headers_too: bool, *routes: str) -> None:
    body = b'{"critic": 1.0, "score": 0.5, "scores": [0.5]}' + b" " * 1000
    for route in routes or ROUTES:
        server.answers[route] = Answer(200, JSON_TYPE, body, 1.0, headers_at_once=not headers_too)


def _pool(server: HostileHTTPServer, **kwargs: Any) -> EndpointPool:
    """A pool as the trainer builds one (reward_model.endpoint_pool): a long per-attempt
    timeout, retries, and the call budget as the total deadline."""
    settings: dict[str, Any] = {
        "timeout": 30.0,
        "max_retries": 2,
        "total_timeout": BUDGET_S,
        "backoff_s": 0.05,
    }
    return EndpointPool(server.url, **{**settings, **kwargs})


# -------------------------------------------------------------------------------- gzip bomb


def test_the_gzip_bomb_is_what_it_claims() -> None:
    bomb = gzip_bomb()
    assert len(bomb) < 1 << 20  # under 1 MB on the wire
    with gzip.GzipFile(fileobj=io.BytesIO(bomb)) as unpacked:
        total = sum(len(chunk) for chunk in iter(lambda: unpacked.read(1 << 20), b""))
    assert total == BOMB_MIB << 20 > 10 * DEFAULT_MAX_RESPONSE_BYTES


def test_a_gzip_bomb_is_dropped_at_the_cap_within_bounded_memory(hostile) -> None:
    _bomb(hostile)
    gzip_bomb()  # built before measuring
    with _pool(hostile) as pool:

        def call() -> BaseException:
            with pytest.raises(BadResponseError) as info:
                pool.request("POST", "/pairwise-critic", json={"task": "t"})
            return info.value

        start = time.monotonic()
        error, growth = peak_growth_mb(lambda: within_guard(call))
        elapsed = time.monotonic() - start
    assert "over the client's limit of 16777216 bytes" in str(error), error
    assert "gzip" in str(error) and error.endpoint == hostile.url
    assert error.attempts == 1  # an oversized answer is not retried
    assert growth < MEMORY_LIMIT_MB, f"peak RSS grew {growth:.0f} MB"
    assert elapsed < BUDGET_S + SLACK_S


def test_a_lower_cap_is_honoured_and_a_legitimate_gzip_answer_is_read(hostile) -> None:
    body = json.dumps({"critic": 12.5}).encode()
    gzipped = {**JSON_TYPE, "content-encoding": "gzip"}
    hostile.answers["/pairwise-critic"] = Answer(200, gzipped, gzip.compress(body))
    with _pool(hostile, max_response_bytes=len(body)) as pool:
        reply = pool.request("POST", "/pairwise-critic", json={})
        assert reply.response.json() == {"critic": 12.5}
        assert "content-encoding" not in reply.response.headers
    with _pool(hostile, max_response_bytes=len(body) - 1) as pool:
        with pytest.raises(BadResponseError, match=f"limit of {len(body) - 1} bytes"):
            pool.request("POST", "/pairwise-critic", json={})


def test_an_encoding_the_client_does_not_decode_is_refused(hostile) -> None:
    hostile.answers["/pairwise-critic"] = Answer(200, {"content-encoding": "br"}, b"\x1b" * 64)
    with _pool(hostile) as pool:
        with pytest.raises(BadResponseError, match="br-encoded; the client decodes only gzip"):
            pool.request("POST", "/pairwise-critic", json={})
    assert hostile.requests  # it was asked, and answered


def test_a_declared_length_over_the_cap_is_refused_before_reading(hostile) -> None:
    declared = {"content-length": str(1 << 30)}
    hostile.answers["/pairwise-critic"] = Answer(200, declared, b"0" * 1000)
    with _pool(hostile) as pool:
        start = time.monotonic()
        with pytest.raises(BadResponseError, match="declares 1073741824 bytes"):
            pool.request("POST", "/pairwise-critic", json={})
        assert time.monotonic() - start < BUDGET_S


# --------------------------------------------------------------------------- one byte a second


@pytest.mark.parametrize("headers_too", [True, False], ids=["whole_answer", "body_only"])
def test_an_answer_sent_a_byte_a_second_ends_by_the_call_budget(hostile, headers_too) -> None:
    _drip(hostile, headers_too)
    with _pool(hostile) as pool:
        start = time.monotonic()
        with pytest.raises(ServiceTimeoutError, match="call budget of 1.5 s spent") as info:
            within_guard(lambda: pool.request("POST", "/pairwise-critic", json={}))
        elapsed = time.monotonic() - start
    # each read waits at most 1 s (a byte arrives): only a total deadline stops the call
    assert BUDGET_S - 0.1 <= elapsed < BUDGET_S + SLACK_S, elapsed
    assert info.value.endpoint == hostile.url


def test_a_slow_health_probe_ends_by_its_timeout(hostile) -> None:
    _drip(hostile, True, "/health")
    with _pool(hostile, probe_timeout_s=0.5) as pool:
        start = time.monotonic()
        assert pool.probe() == {hostile.url: False}
        assert time.monotonic() - start < 0.5 + SLACK_S


# ----------------------------------------------------------------------- every client, soft


def _encoded_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "PNG")
    return buf.getvalue()


def _calls() -> dict[str, Callable[[EndpointPool], Any]]:
    """One trainer-style call per client, fail-soft (the failure policy of long runs)."""
    frames = [paint(10), paint(40)]

    def progress(pool: EndpointPool) -> Any:
        return ProgressClient(pool, warn_interval_s=3600).pairwise_critic("t", *frames)

    def pickle_scorer(pool: EndpointPool) -> Any:
        return PickleScorerClient(pool, warn_interval_s=3600).score(frames, ["a", "b"])

    def video(pool: EndpointPool) -> Any:
        return VideoScoreClient(pool, warn_interval_s=3600).score("t", frames)

    def robometer(pool: EndpointPool) -> Any:
        return RobometerClient(pool, warn_interval_s=3600).progress("t", np.stack(frames))

    return {
        "progress": progress,
        "pickle_scorer": pickle_scorer,
        "video_score": video,
        "robometer": robometer,
    }


@pytest.mark.parametrize("attack", ["bomb", "drip"])
@pytest.mark.parametrize("client", list(_calls()))
def test_every_client_counts_a_hostile_answer_as_an_error_and_goes_on(
    hostile, client, attack
) -> None:
    _bomb(hostile) if attack == "bomb" else _drip(hostile, True)
    call = _calls()[client]
    with _pool(hostile) as pool:
        start = time.monotonic()
        result, growth = peak_growth_mb(lambda: within_guard(lambda: call(pool)))
        elapsed = time.monotonic() - start
    assert result.fallback and not result.ok
    kind = "over the client's limit" if attack == "bomb" else "call budget of 1.5 s spent"
    assert kind in result.error, result.error
    assert elapsed < BUDGET_S + SLACK_S + 0.5  # + encoding the frames (video: an MP4)
    assert growth < MEMORY_LIMIT_MB, f"peak RSS grew {growth:.0f} MB"


@pytest.mark.parametrize("attack", ["bomb", "drip"])
def test_the_start_up_check_names_a_hostile_answer(hostile, attack) -> None:
    _bomb(hostile, "/capabilities") if attack == "bomb" else _drip(hostile, True, "/capabilities")
    with _pool(hostile) as pool:
        with pytest.raises(ServiceUnavailableError) as info:
            within_guard(lambda: check_service(pool))
    assert info.value.reason in ("wrong_protocol", "unreachable", "error"), info.value
    words = "over the client's limit" if attack == "bomb" else "call budget of 1.5 s spent"
    assert words in str(info.value)


def test_the_env_wrapper_falls_back_and_counts_the_errors(hostile) -> None:
    """A progress wrapper on a service that bombs every critic: each step with a model call
    gets the fallback reward and one more error, and the episode goes on."""
    from evolve_envs.wrappers.progress_reward import ProgressReward

    _bomb(hostile, "/trajectory-critic", "/pairwise-critic", "/done")

    class Still(gym.Env):
        observation_space = gym.spaces.Dict(
            {"agentview_image": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)}
        )
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return {"agentview_image": paint(10)}, {"task_description": "t"}

        def step(self, action: Any) -> Any:
            return {"agentview_image": paint(10)}, 0.0, False, False, {}

    client = ProgressClient(_pool(hostile), close_pool=True, warn_interval_s=3600)
    env = ProgressReward(gym.wrappers.TimeLimit(Still(), 6), lend(client), start_step=2,
                         call_every=2)  # fmt: skip
    try:
        env.reset(seed=0)
        infos = [within_guard(lambda: env.step(0))[4] for _ in range(6)]
    finally:
        env.close()
        client.close()
    assert infos[-1]["reward_model_errors"] >= 2, infos[-1]
    assert client.stats.errors >= 2 and client.stats.fallbacks == client.stats.errors
    assert "over the client's limit" in (client.stats.last_error or "")


def test_a_pickle_answer_over_the_cap_never_reaches_the_codec(hostile) -> None:
    """A scorer answering a 20 MB pickle (a valid one) is refused by size, before unpickling."""
    payload = safe_pickle_dumps({"scores": [0.5], "pad": b"\0" * (20 << 20)})
    hostile.answers["/"] = Answer(200, {}, payload)
    with _pool(hostile) as pool:
        client = PickleScorerClient(pool, fail_on_request_error=True)
        with pytest.raises(BadResponseError, match="over the client's limit"):
            client.score([_encoded_png()], ["p"])


def test_the_deadline_does_not_touch_an_ordinary_call(hostile) -> None:
    hostile.answers["/pairwise-critic"] = Answer(200, JSON_TYPE, b'{"critic": 3.5}')
    with _pool(hostile) as pool:
        client = ProgressClient(pool, fail_on_request_error=True)
        for _ in range(3):  # keep-alive connections reused across calls
            assert client.pairwise_critic("t", paint(1), paint(2)).value == 3.5
