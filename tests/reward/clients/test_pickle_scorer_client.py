"""PickleScorerClient against a real server: sync, async from repeated event loops, faults."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest
import simplejpeg

from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.reward.clients.client_helpers import arm_fault, paint, within_guard


@pytest.fixture
def client(server_a, make_pool):
    with PickleScorerClient(make_pool(server_a.url), fallback_score=-1.0) as scorer:
        yield scorer


def test_sync_score_is_exact(client):
    result = client.score([paint(10), paint(55), paint(100)], ["a", "b", "c"], {"step": 3})
    assert result.ok and result.value == pytest.approx([0.10, 0.55, 1.00])


def test_encoded_jpeg_bytes_are_sent_as_given(client):
    jpeg = simplejpeg.encode_jpeg(paint(30), quality=95)
    assert client.score([jpeg], ["x"]).value == pytest.approx([0.30])


def test_compute_score_from_successive_asyncio_runs(client):
    async def one_step(p: int) -> list[float]:
        result = await client.compute_score([paint(p)], [f"step {p}"])
        assert result.ok
        return result.value

    # Each asyncio.run() makes and closes a new event loop (the failure mode of clients that
    # cache a session bound to the first loop).
    assert asyncio.run(one_step(20)) == pytest.approx([0.20])
    assert asyncio.run(one_step(40)) == pytest.approx([0.40])
    assert asyncio.run(one_step(60)) == pytest.approx([0.60])


def test_compute_score_from_a_sync_step_called_repeatedly(client):
    def sync_step(p: int) -> float:
        return asyncio.run(client.compute_score([paint(p)], ["t"])).value[0]

    assert [sync_step(p) for p in (5, 15, 25, 35)] == pytest.approx([0.05, 0.15, 0.25, 0.35])


def test_concurrent_compute_scores_in_one_loop(client):
    async def many() -> list[list[float]]:
        calls = [client.compute_score([paint(p), paint(100 - p)], ["a", "b"]) for p in range(10)]
        return [r.value for r in await asyncio.gather(*calls)]

    values = asyncio.run(many())
    assert values == [pytest.approx([p / 100, (100 - p) / 100]) for p in range(10)]


def test_server_side_scorer_error_is_named(make_pool):
    with EmbeddedService("mock", {"fail_marker": "EXPLODE"}) as service:
        strict = PickleScorerClient(
            make_pool(service.url, max_retries=0), fail_on_request_error=True
        )
        with pytest.raises(RewardServiceError) as info:
            strict.score([paint(10)], ["please EXPLODE"])
        assert info.value.status_code == 500 and "backend 'mock' failed" in str(info.value)
        assert "EXPLODE" not in str(info.value)  # the backend's own message stays in its log
        assert info.value.route == "/" and info.value.endpoint == service.url
        soft = PickleScorerClient(make_pool(service.url, max_retries=0), fallback_score=0.25)
        result = soft.score([paint(10), paint(20)], ["EXPLODE", "b"])
        assert result.fallback and result.value == [0.25, 0.25]


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("wrong_length", "expected 2 scores"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("invalid_json", "not a safe pickle"),
        ("reset", "Error"),
        ("status", "HTTP 503"),
    ],
)
def test_faults_fall_back_or_raise(mode, words, server_a, make_pool):
    arm_fault(server_a, mode=mode, status=503)
    soft = PickleScorerClient(make_pool(server_a.url), fallback_score=-1.0)
    result = within_guard(lambda: soft.score([paint(10), paint(20)], ["a", "b"]))
    assert result.fallback and result.value == [-1.0, -1.0] and words in result.error
    strict = PickleScorerClient(make_pool(server_a.url), fail_on_request_error=True)
    with pytest.raises(RewardServiceError, match=words) as info:
        within_guard(lambda: asyncio.run(strict.compute_score([paint(10), paint(20)], ["a", "b"])))
    assert info.value.endpoint == server_a.url and f"{server_a.url}/ failed" in str(info.value)


def test_a_response_pickle_that_names_a_global_is_refused(server_a, make_pool):
    """A hostile answer must not execute: the restricted unpickler refuses any global."""
    from evolve_envs.reward.clients.pickle_scorer_client import _parse_scores
    from evolve_envs.reward.clients.pool_call import PoolResponse

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    import httpx

    reply = PoolResponse(
        httpx.Response(200, content=pickle.dumps({"scores": Evil()})), server_a.url, 1, 0.0
    )
    with pytest.raises(RewardServiceError, match="global") as info:
        _parse_scores(reply, "/pickle", 1)
    assert info.value.kind == ErrorKind.INVALID_RESPONSE


@pytest.mark.parametrize(
    ("images", "prompts", "metadata", "words"),
    [
        ([], [], None, "at least one image"),
        ([paint(1)], ["a", "b"], None, "one prompt per image"),
        ([paint(1)], [3], None, "prompts"),
        ([np.zeros((4, 4), np.float64)], ["a"], None, "uint8"),
        ([paint(1)], ["a"], {"arr": np.array([None], dtype=object)}, "ndarray"),
    ],
)
def test_bad_inputs_raise_in_the_caller(client, images, prompts, metadata, words):
    with pytest.raises((ValueError, TypeError), match=words):
        client.score(images, prompts, metadata)
    assert client.stats.snapshot()["calls"] == 0


_CHILD = """
import sys
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import BadResponseError
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient

url = sys.argv[1]
jpeg = bytes.fromhex(sys.argv[2])
strict = PickleScorerClient(EndpointPool(url, max_retries=0), fail_on_request_error=True)
try:
    strict.score([jpeg], ["p"])
except BadResponseError as exc:
    print("refused:", exc)
soft = PickleScorerClient(EndpointPool(url, max_retries=0), fallback_score=-1.0)
result = soft.score([jpeg], ["p"])
print("fallback:", result.value, result.fallback, soft.stats.errors)
"""


def test_a_hostile_scorer_answer_cannot_crash_the_training_process() -> None:
    """F2 on the client: a scorer (a real HTTP server on 127.0.0.1) answers the 141-byte
    pickle that made `np.frombuffer` build a 64 MB view over 8 bytes. The training process
    (a child here, so a crash shows as its exit code, -11 for SIGSEGV) gets a typed error in
    fail-fast mode and the fallback score in fail-soft mode, and exits normally."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.fuzz.hostile import DTYPE_SUBARRAY_CRASH
    from tests.reward.clients.client_helpers import Answer, HostileHTTPServer

    jpeg = simplejpeg.encode_jpeg(paint(30), quality=90)
    with HostileHTTPServer() as scorer:
        scorer.answers["/"] = Answer(200, {"content-type": "application/octet-stream"},
                                     DTYPE_SUBARRAY_CRASH)  # fmt: skip
        root = str(Path(__file__).resolve().parents[3])  # this checkout, first on the path
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        }
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, scorer.url, jpeg.hex()],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "refused: " in child.stdout and "subarray" in child.stdout, child.stdout
    assert "body is not a safe pickle" in child.stdout
    assert "fallback: [-1.0] True 1" in child.stdout, child.stdout
    assert scorer.requests == ["/", "/"]
